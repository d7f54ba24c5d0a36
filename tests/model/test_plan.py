"""Plans: constructors, cut vectors, validation naming the byte range, JSON."""

import json
import re
from fractions import Fraction

import numpy as np
import pytest

from fusionopt.model import Chunk, Message, Plan, Profile


@pytest.fixture
def profile():
    return Profile.from_arrays([100, 50, 30, 20], [0.0] * 4, [1.0] * 4, ["w1", "b1", "w2", "b2"])


def test_per_tensor_is_backward_order(profile):
    plan = Plan.per_tensor(profile)
    assert plan.groups() == [[3], [2], [1], [0]]
    assert plan.cuts(profile).tolist() == [True, True, True]
    assert plan.is_fusion(profile)


def test_from_cuts_round_trip_every_vector(profile):
    for bits in range(8):
        cuts = np.array([(bits >> k) & 1 for k in range(3)], dtype=bool)
        plan = Plan.from_cuts(profile, cuts)
        assert plan.cuts(profile).tolist() == cuts.tolist()
        assert plan.num_messages == cuts.sum() + 1
        assert sum(plan.message_bytes) == 200
        plan.validate(profile)


def test_from_groups_keeps_channel_order(profile):
    plan = Plan.from_groups(profile, [[0, 1], [3], [2]])
    assert plan.message_bytes.tolist() == [150, 20, 30]
    assert not plan.is_fusion(profile)
    with pytest.raises(ValueError, match="not a fusion plan"):
        plan.cuts(profile)


def test_from_groups_rejects_bad_indices(profile):
    with pytest.raises(ValueError, match="tensor index 4 is out of range for a profile of 4 tensors"):
        Plan.from_groups(profile, [[0, 1, 2, 3, 4]])
    with pytest.raises(ValueError, match="group 1 is empty"):
        Plan.from_groups(profile, [[0, 1, 2, 3], []])
    with pytest.raises(ValueError, match="n - 1 = 3 entries"):
        Plan.from_cuts(profile, [True, False])


@pytest.mark.parametrize("cuts, bad", [(["False", "True", "False"], "'False' at position 0"),
                                       ([0.5, 1, 0], "0.5 at position 0"), ([0, 0, 2], "2 at position 2"),
                                       ([np.nan, 1, 0], "nan at position 0"), ([0, 1, "x"], "'x' at position 2"),
                                       ([None, 1, 0], "None at position 0"), ([1, Fraction(1, 2), 0],
                                                                             "Fraction(1, 2) at position 1")])
def test_a_cut_vector_holds_booleans_or_0_and_1(profile, cuts, bad):
    # Read as truth values these would be cuts: "False" and 0.5 would each split a message.
    with pytest.raises(ValueError, match=f"^cut vectors hold 0/1 or booleans, got {re.escape(bad)}$"):
        Plan.from_cuts(profile, cuts)
    assert Plan.from_cuts(profile, [1, 0, 1]).groups() == Plan.from_cuts(profile, [True, False, True]).groups()


@pytest.mark.parametrize("groups", [[[3.0, 2.7], [1, 0]], [[3, "2"], [1, 0]], [[3, True], [1, 0]]])
def test_a_group_holds_integer_indices(profile, groups):
    # int() would make 2.7 tensor 2 and True tensor 1, a plan of other tensors than given.
    with pytest.raises(ValueError, match="group 0: a tensor index must be an integer"):
        Plan.from_groups(profile, groups)
    with pytest.raises(ValueError, match="a tensor index must be an integer, got 3.5"):
        Plan.per_tensor(profile, [3.5, 2, 1, 0])


def test_validate_names_missing_bytes(profile):
    plan = Plan((Message((Chunk(0, 0, 60), Chunk(1, 0, 50), Chunk(2, 0, 30), Chunk(3, 0, 20))),))
    with pytest.raises(ValueError, match=r"tensor 'w1' \(index 0\): bytes \[60, 100\) are missing"):
        plan.validate(profile)
    gap = Plan((Message((Chunk(0, 0, 40), Chunk(0, 50, 100), Chunk(1, 0, 50), Chunk(2, 0, 30), Chunk(3, 0, 20))),))
    with pytest.raises(ValueError, match=r"tensor 'w1' \(index 0\): bytes \[40, 50\) are missing"):
        gap.validate(profile)
    absent = Plan.from_groups(profile, [[0, 1, 2]])
    with pytest.raises(ValueError, match=r"tensor 'b2' \(index 3\): bytes \[0, 20\) are missing \(the tensor is in no message\)"):
        absent.validate(profile)


def test_validate_names_repeated_bytes(profile):
    plan = Plan((
        Message((Chunk(3, 0, 20), Chunk(2, 0, 30))),
        Message((Chunk(1, 0, 50), Chunk(0, 0, 70))),
        Message((Chunk(0, 60, 100),)),
    ))
    with pytest.raises(ValueError, match=r"tensor 'w1' \(index 0\): bytes \[60, 70\) are repeated \(messages 1 and 2\)"):
        plan.validate(profile)
    twice = Plan.from_groups(profile, [[3, 2], [1, 0], [3]])
    with pytest.raises(ValueError, match=r"tensor 'b2' \(index 3\): bytes \[0, 20\) are repeated \(messages 0 and 2\)"):
        twice.validate(profile)


def test_validate_names_out_of_range(profile):
    beyond = Plan((Message((Chunk(3, 0, 25), Chunk(2, 0, 30), Chunk(1, 0, 50), Chunk(0, 0, 100))),))
    with pytest.raises(ValueError, match=r"tensor 'b2' \(index 3\): message 0 sends bytes \[20, 25\) beyond its size of 20 bytes"):
        beyond.validate(profile)
    with pytest.raises(ValueError, match="message 0: tensor index 9 is out of range"):
        Plan((Message((Chunk(9, 0, 1),)),)).validate(profile)


def test_structural_errors():
    with pytest.raises(ValueError, match=r"byte range \[5, 5\) is empty"):
        Chunk(0, 5, 5)
    with pytest.raises(ValueError, match="chunk tensor index must be >= 0"):
        Chunk(-1, 0, 5)
    with pytest.raises(ValueError, match="at least one chunk"):
        Message(())
    with pytest.raises(ValueError, match="at least one message"):
        Plan(())


def test_partition_plan_validates(profile):
    plan = Plan((
        Message((Chunk(3, 0, 20), Chunk(2, 0, 10))),
        Message((Chunk(0, 0, 50),)),
        Message((Chunk(2, 10, 30), Chunk(1, 0, 50), Chunk(0, 50, 100))),
    ))
    assert plan.validate(profile) is plan
    assert plan.message_bytes.tolist() == [30, 50, 120]


def test_json_round_trip_and_errors(tmp_path, profile):
    plan = Plan((Message((Chunk(3, 0, 20), Chunk(2, 0, 10))), Message((Chunk(2, 10, 30), Chunk(1, 0, 50), Chunk(0, 0, 100)))))
    path = tmp_path / "plan.json"
    plan.write(path)
    assert Plan.read(path) == plan
    assert json.loads(path.read_text())["messages"][0] == [[3, 0, 20], [2, 0, 10]]
    path.write_text('{"schema": "fusionopt.plan", "version": 1, "messages": [[[0, 0, 5], [1, 7]]]}')
    with pytest.raises(ValueError, match=r"plan.json: messages\[0\]\[1\] must be \[tensor, lo, hi\]"):
        Plan.read(path)
    path.write_text('{"schema": "fusionopt.plan", "version": 1, "messages": [[[0, 9, 5]]]}')
    with pytest.raises(ValueError, match=r"messages\[0\]\[0\]: chunk of tensor 0: byte range \[9, 5\) is empty"):
        Plan.read(path)
    path.write_text('{"schema": "fusionopt.plan", "version": 1, "messages": []}')
    with pytest.raises(ValueError, match="at least one message"):
        Plan.read(path)
    path.write_text('{"messages": [')
    with pytest.raises(ValueError, match="malformed JSON"):
        Plan.read(path)


def test_the_table_and_the_messages_are_one_plan(profile):
    # A plan built from messages and the same plan built as a table: equal, same hash, same
    # table, same messages; pickling keeps it.
    import pickle

    messages = (Message((Chunk(2, 0, 100), Chunk(1, 5, 10))), Message((Chunk(1, 0, 5),), 0.25),
                Message((Chunk(0, 0, 300), Chunk(1, 10, int(profile.sizes[1])))))
    from_messages = Plan(messages)
    table = Plan.from_table(from_messages.tensor, from_messages.lo, from_messages.hi, from_messages.starts,
                            from_messages.release)
    assert table == from_messages and hash(table) == hash(from_messages)
    assert table.messages == messages
    assert from_messages.tensor.tolist() == [2, 1, 1, 0, 1] and from_messages.starts.tolist() == [0, 2, 3, 5]
    assert from_messages.message_bytes.tolist() == [105, 5, 300 + int(profile.sizes[1]) - 10]
    assert from_messages.chunk_message.tolist() == [0, 0, 1, 2, 2]
    assert from_messages.groups() == [[2, 1], [1], [0, 1]]
    assert pickle.loads(pickle.dumps(table)) == table
    assert table != Plan(messages[:2]) and table != table.without_release()
    with pytest.raises(AttributeError):
        table.tensor = None


@pytest.mark.parametrize("arrays, message", [
    (([0], [0], [0], [0, 1]), r"byte range \[0, 0\) is empty"),
    (([-1], [0], [4], [0, 1]), "tensor index must be >= 0"),
    (([0, 1], [0, 0], [4, 4], [0, 0, 2]), "at least one chunk"),
    (([0], [0], [4], [0, 2]), "at least one message"),
    (([0], [0], [4], [0, 1], [-1.0]), "release time must be finite and >= 0"),
    (([0], [0], [4], [0, 1], [0.0, 1.0]), "2 release times for 1 messages"),
    (([0.7], [0], [4], [0, 1]), "a plan table's tensor must hold integers, got float64 values"),
    (([0], [0.5], [4], [0, 1]), "a plan table's lo must hold integers"),
    (([0], [0], [4], [0, 1], ["1"]), "release times must be numbers of seconds"),
    (([2**70], [0], [4], [0, 1]), "a plan table's tensor holds an integer beyond int64"),
])
def test_from_table_refuses_what_plan_refuses(arrays, message):
    with pytest.raises(ValueError, match=message):
        Plan.from_table(*arrays)


def test_fast_validate_agrees_with_the_named_faults(profile):
    # The vectorised check passes exactly the plans the explaining walk passes.
    sizes = [int(s) for s in profile.sizes]
    good = Plan.from_groups(profile, [[i] for i in range(profile.n)])
    assert good.validate(profile) is good
    for tensor, lo, hi in [(0, 0, sizes[0] - 1), (0, 1, sizes[0])]:
        rows = [(tensor, lo, hi)] + [(i, 0, sizes[i]) for i in range(1, profile.n)]
        bad = Plan(tuple(Message((Chunk(*r),)) for r in rows))
        with pytest.raises(ValueError, match="are missing"):
            bad.validate(profile)
