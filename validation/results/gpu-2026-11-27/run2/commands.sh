export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD; O=<output folder>; mkdir -p $O/gpu-logs
timeout 235 python3 validation/gpu/run.py --out $O --budget 215 --stages hardware-spin,hardware-gemm,training
echo "== contention"; timeout 90 python3 .gpurun/contention.py 75 $O/contention-calibration-gpu.json > $O/gpu-logs/contention2.txt 2>&1; echo "rc $?" >> $O/gpu-logs/contention2.txt; tail -n 40 $O/gpu-logs/contention2.txt
echo "== step rest"; timeout 90 python3 validation/step/run.py --device cuda --out $O --time-limit 70 --cases bert-base:32,gpt2:8,vit-b16:64,bert-large:16,gpt2-medium:4 > $O/gpu-logs/step2.txt 2>&1; tail -n 5 $O/gpu-logs/step2.txt
cd $O && tar czf $OUT/gpu-results2.tar.gz . ; ls -R $O | head -40; cat $O/gpu-run.md
