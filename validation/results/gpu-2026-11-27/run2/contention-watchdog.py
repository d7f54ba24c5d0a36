import faulthandler, sys
faulthandler.dump_traceback_later(float(sys.argv[1]), exit=True)
sys.argv = ["fusionopt", "calibrate", "--backend", "nccl", "--contention", "--output", sys.argv[2]]
from fusionopt.cli import main
sys.exit(main())
