"""Profile: validation with errors that name the tensor, derived figures, JSON."""

import dataclasses
import json
import math

import numpy as np
import pytest

from fusionopt.model import Profile, read_profile_csv, write_profile_csv


def make(**overrides):
    args = dict(sizes=[400, 100, 200], forward=[1.0, 1.0, 1.0], backward=[3.0, 2.0, 1.0], names=["a", "b", "c"])
    args.update(overrides)
    return Profile.from_arrays(**args)


def test_derived_figures():
    p = make(update=[0.5, 0.0, 0.25])
    assert p.ready_times.tolist() == [6.0, 3.0, 1.0]
    assert (p.B, p.F, p.U, p.total_bytes, p.n) == (6.0, 3.0, 0.75, 700, 3)
    assert p.compute_time == 9.75
    assert p.index("b") == 1


@pytest.mark.parametrize("field,value,message", [
    ("backward", [3.0, math.nan, 1.0], "tensor 'b': backward time is NaN"),
    ("forward", [1.0, 1.0, math.inf], "tensor 'c': forward time is infinite"),
    ("backward", [3.0, -2.0, 1.0], "tensor 'b': backward time is negative"),
    ("sizes", [400, 0, 200], "tensor 'b': size is zero bytes"),
    ("sizes", [400, -100, 200], "tensor 'b': size is negative"),
    ("sizes", [400, 100.5, 200], "tensor 'b': size must be a whole number of bytes"),
    ("sizes", [math.nan, 100, 200], "tensor 'a': size is NaN"),
    ("update", [0.0, 0.0, math.nan], "tensor 'c': update time is NaN"),
])
def test_bad_values_name_the_tensor(field, value, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        make(**{field: value})


@pytest.mark.parametrize("field,value,message", [
    ("sizes", np.array([400, 0, 200]), "tensor 'b': size is zero bytes"),
    ("sizes", np.array([400, -100, 200]), "tensor 'b': size is negative"),
    ("sizes", np.array([400, 2**63, 200], dtype=np.uint64), "tensor 'b': size 9223372036854775808 bytes is more"),
    ("backward", np.array([3.0, -2.0, 1.0]), "tensor 'b': backward time is negative"),
    ("ready_order", (2, 1, 1), "ready_order lists tensor 'b' twice"),
    ("ready_order", (2, 1, True), "ready_order holds True: expected a tensor name or a forward index"),
    ("ready_order", (2, 1, 3), "ready_order holds index 3, out of range for 3 tensors"),
    ("ready_order", (2, 1), "ready_order lists 2 of 3 tensors; 'a' is missing"),
    ("ready_order", (2, 0, 1), "ready_order puts tensor 'a' (ready at 6 s) before 'b' (ready at 3 s)"),
    ("shapes", ((10, 10), (5, 4), (50,)), "tensor 'b': shape [5, 4] holds 20 elements of 4 bytes, not its 100"),
    ("shapes", ((10, 10), (25, 0), (50,)), "tensor 'b': shape [25, 0] must hold positive whole dimensions"),
    ("shapes", ((10, 10), (25, True), (50,)), "tensor 'b': shape [25, True] must hold positive whole dimensions"),
])
def test_values_in_a_profiles_own_forms_are_checked_alike(field, value, message):
    # Arrays and tuples, as a profile keeps them (what dataclasses.replace hands back), take
    # the checks' quick path when they are right and get the same line when they are not.
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        dataclasses.replace(make(), **{field: value})


def test_a_profiles_own_forms_are_kept():
    p = make(backward=[3.0, 0.0, 1.0], shapes=[[10, 10], [25], [50]])        # b and c ready at the same moment
    q = dataclasses.replace(p, ready_order=(1, 2, 0), backward=np.array([3.0, 0.0, 1.0]))
    assert q.ready_order == (1, 2, 0) and q.backward_order.tolist() == [1, 2, 0]
    assert q.shapes == ((10, 10), (25,), (50,)) and q.sizes.dtype == np.int64 and q.sizes.tolist() == [400, 100, 200]
    assert dataclasses.replace(q, sizes=np.array([400, 100, 200], dtype=np.uint32)) == q


def test_length_mismatch_and_empty_and_duplicates():
    with pytest.raises(ValueError, match="length mismatch: 3 tensor names but 2 backward values"):
        make(backward=[1.0, 2.0])
    with pytest.raises(ValueError, match="profile is empty"):
        Profile.from_arrays([], [], [])
    with pytest.raises(ValueError, match="tensor 'a': name repeated"):
        make(names=["a", "b", "a"])


def test_arrays_are_read_only():
    p = make()
    with pytest.raises(ValueError):
        p.sizes[0] = 1


def test_json_round_trip(tmp_path):
    p = make(update=[0.5, 0.0, 0.25], name="toy", metadata={"device": "h100", "batch": 64})
    path = tmp_path / "toy.json"
    p.write(path)
    q = Profile.read(path)
    assert q == p
    doc = json.loads(path.read_text())
    assert doc["schema"] == "fusionopt.profile" and doc["version"] == 1
    assert doc["tensors"][0] == {"name": "a", "size": 400, "forward": 1.0, "backward": 3.0, "update": 0.5}
    assert not list(tmp_path.glob(".*.tmp")), "atomic writer left its temporary file"


@pytest.mark.parametrize("text,message", [
    ("{not json", r"malformed JSON at line 1"),
    ("[1, 2]", "expected a JSON object"),
    ('{"schema": "fusionopt.plan", "version": 1, "tensors": []}', "schema is 'fusionopt.plan'"),
    ('{"version": 7, "tensors": []}', "unsupported profile version 7"),
    ('{"version": 1, "tensors": {}}', "'tensors' must be a list"),
    ('{"version": 1, "tensors": []}', "profile is empty"),
    ('{"version": 1, "tensors": [{"name": "w", "size": 4, "forward": 0}]}', "tensor 'w' has no 'backward'"),
    ('{"version": 1, "tensors": [{"name": "w", "size": "4", "forward": 0, "backward": 0}]}',
     "tensor 'w': 'size' must be a number"),
    ('{"version": 1, "tensors": [{"name": "w", "size": 4, "forward": -1, "backward": 0}]}',
     "tensor 'w': forward time is negative"),
])
def test_malformed_json_is_named(tmp_path, text, message):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=message) as info:
        Profile.read(path)
    assert "bad.json" in str(info.value)


def test_missing_file():
    with pytest.raises(FileNotFoundError, match="nope.json"):
        Profile.read("nope.json")


def test_equality_sees_every_field():
    p = make()
    assert p == make()
    assert p != make(forward=[1.0, 1.0, 2.0])
    assert p != make(sizes=[400, 100, 201])
    assert not np.array_equal(make(update=[0, 0, 1.0]).update, p.update)


# ---------------------------------------------------------------------------- CSV
from hypothesis import given, settings, strategies as st  # noqa: E402


def test_csv_round_trip_exact_values(tmp_path):
    p = make(update=[0.5, 0.0, 0.25], names=["conv1.weight", "a,b", 'c"d'])
    path = tmp_path / "toy.csv"
    write_profile_csv(p, path)
    lines = path.read_text().splitlines()
    assert lines[0] == "name,size_bytes,forward_s,backward_s,update_s"
    assert lines[1] == "conv1.weight,400,1.0,3.0,0.5"
    assert lines[2] == '"a,b",100,1.0,2.0,0.0'
    assert lines[3] == '"c""d",200,1.0,1.0,0.25'
    q = read_profile_csv(path)
    assert q == p
    assert not list(tmp_path.glob(".*.tmp")), "atomic writer left its temporary file"
    # name, dtype_bytes and metadata do not travel in CSV; read_csv takes them.
    r = read_profile_csv(path, name="toy", dtype_bytes=2, metadata={"batch": 8})
    assert (r.name, r.dtype_bytes, dict(r.metadata)) == ("toy", 2, {"batch": 8})


def test_sizes_must_sum_to_what_a_profile_holds():
    # Each is below 2**63, their sum is not: int64 would wrap it to a negative total.
    with pytest.raises(ValueError, match=r"sizes sum to 9223372036854775808 bytes, more than 2\*\*63 - 1"):
        Profile.from_arrays([2**62, 2**62], [0, 0], [1, 1])
    assert Profile.from_arrays([2**62, 2**62 - 1], [0, 0], [1, 1]).total_bytes == 2**63 - 1


def test_other_backward_times_are_one_per_tensor():
    # Three times for two tensors would give a third ready time and B = 7 s.
    p = Profile.from_arrays([8, 8], [0, 0], [1, 1])
    for times in ([1, 1, 5], [1]):
        with pytest.raises(ValueError, match=f"length mismatch: 2 tensor names but {len(times)} backward values"):
            p.with_backward(times)
    assert p.with_backward(iter([2.0, 3.0])).B == 5.0


@settings(max_examples=40, deadline=None)
@given(st.lists(                                    # sizes whose sum a profile holds (< 2**63 bytes)
    st.tuples(st.integers(1, 2**59),
              st.floats(0, 1e3, allow_nan=False), st.floats(0, 1e3, allow_nan=False),
              st.floats(0, 1e3, allow_nan=False)),
    min_size=1, max_size=8,
))
def test_csv_round_trip_any_values(tmp_path_factory, rows):
    sizes, fwd, bwd, upd = (list(x) for x in zip(*rows))
    p = Profile.from_arrays(sizes, fwd, bwd, [f"layer{i}.weight" for i in range(len(rows))], update=upd)
    path = tmp_path_factory.mktemp("csv") / "p.csv"
    write_profile_csv(p, path)
    assert read_profile_csv(path) == p


def test_csv_columns_in_any_order_and_update_optional(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("backward_s,name,forward_s,size_bytes\n3.0,a,1.0,400\n2.0,b,1.0,100\n\n")
    p = read_profile_csv(path)
    assert p.names == ("a", "b")
    assert p.sizes.tolist() == [400, 100]
    assert p.backward.tolist() == [3.0, 2.0] and p.update.tolist() == [0.0, 0.0]


HEADER = "name,size_bytes,forward_s,backward_s,update_s\n"


@pytest.mark.parametrize("text,message", [
    ("", "empty file: expected a header line name,size_bytes"),
    ("\n\n", "empty file"),
    (HEADER, "no tensor rows after the header"),
    ("name,size_bytes,forward_s,update_s\na,4,0,0\n", "line 1: missing column 'backward_s'"),
    ("name,size_bytes,forward_s,backward_s,extra\n", "line 1: unknown column 'extra'"),
    ("name,size_bytes,forward_s,backward_s,name\n", "line 1: column 'name' repeated"),
    ("a,4,0,0,0\n", "line 1: unknown column 'a'"),
    (HEADER + "a,4,0,0,0\nb,4,0,0\n", "line 3: 4 cells, expected 5"),
    (HEADER + "a,4,0.1,x,0\n", "line 2, column 'backward_s' \\(tensor 'a'\\): not a number: 'x'"),
    (HEADER + "a,4,nan,0,0\n", "line 2, column 'forward_s' \\(tensor 'a'\\): NaN"),
    (HEADER + "a,4,0,inf,0\n", "line 2, column 'backward_s' \\(tensor 'a'\\): infinite"),
    (HEADER + "a,4,0,0,0\nb,4,0,0,-1e-3\n", "line 3, column 'update_s' \\(tensor 'b'\\): negative \\(-1e-3 s\\)"),
    (HEADER + "a,-4,0,0,0\n", "line 2, column 'size_bytes' \\(tensor 'a'\\): negative \\(-4 bytes\\)"),
    (HEADER + "a,0,0,0,0\n", "line 2, column 'size_bytes' \\(tensor 'a'\\): zero bytes"),
    (HEADER + "a,4.5,0,0,0\n", "line 2, column 'size_bytes' \\(tensor 'a'\\): not a whole number of bytes"),
    (HEADER + "a,,0,0,0\n", "line 2, column 'size_bytes' \\(tensor 'a'\\): not a number: ''"),
    (HEADER + ",4,0,0,0\n", "line 2, column 'name': empty tensor name"),
    (HEADER + "a,4,0,0,0\na,8,0,0,0\n", "tensor 'a': name repeated"),
    (HEADER + '"a,4,0,0,0\n', "malformed CSV"),
])
def test_bad_csv_is_named(tmp_path, text, message):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(ValueError, match=message) as info:
        read_profile_csv(path)
    assert str(info.value).startswith(str(path))


def test_csv_missing_file_and_binary(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.csv"):
        read_profile_csv(tmp_path / "nope.csv")
    path = tmp_path / "bin.csv"
    path.write_bytes(b"\xff\xfe\x00name")
    with pytest.raises(ValueError, match="bin.csv: not UTF-8 text"):
        read_profile_csv(path)


def test_csv_to_missing_folder_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        write_profile_csv(make(), tmp_path / "no" / "p.csv")


def test_nothing_given_is_ignored_or_misread(tmp_path):

    from fusionopt.model import Plan
    from fusionopt.cost import cost_from_dict

    with pytest.raises(ValueError, match=r"sizes must be a sequence, one entry per tensor, got the string '123'"):
        Profile.from_arrays("123", [0.0] * 3, [0.0] * 3)
    with pytest.raises(ValueError, match=r"tensor 't0': size 18446744073709551616 bytes is more than 2\*\*63 - 1"):
        Profile.from_arrays([2**64], [0.0], [0.0])
    doc = Profile.from_arrays([8], [0.0], [1e-3]).to_dict()
    doc["tensors"][0]["updte"] = 1e-3                   # a typo gave update time 0 and a wrong T
    with pytest.raises(ValueError, match=r"tensor 't0' has an unknown key 'updte' \(a tensor holds name, size"):
        Profile.from_dict(doc)
    with pytest.raises(ValueError, match=r"profile: unknown key 'tensor' \(a profile holds schema"):
        Profile.from_dict({"version": 1, "tensor": []})
    with pytest.raises(ValueError, match=r"plan: unknown key 'mesages'"):
        Plan.from_dict({"version": 1, "mesages": []})
    with pytest.raises(ValueError, match=r"cost: unknown key 'alfa' in a alpha_beta cost"):
        cost_from_dict({"kind": "alpha_beta", "alpha": 1e-3, "beta": 1e-9, "alfa": 2e-3})
    assert cost_from_dict({"kind": "alpha_beta", "alpha": 1e-3, "beta": 1e-9, "calibration": {}}).alpha == 1e-3


def test_with_backward_is_replace_without_the_other_checks():
    p = Profile.from_arrays([8, 16, 24], [1e-3, 2e-3, 3e-3], [0.0, 0.0, 0.0], ["a", "b", "c"],
                            ready_order=[0, 2, 1], metadata={"k": 1}, shapes=[(2,), (4,), (6,)], update_lump=1e-3)
    assert p.compute_time == pytest.approx(7e-3)           # cached before the change
    backward = [3e-3, 1e-3, 1e-3]
    for keep, order in ((True, [0, 2, 1]), (False, None)):
        fast = p.with_backward([0.0] * 3) if keep else p.with_backward(backward, keep_order=False)
        slow = dataclasses.replace(p, backward=[0.0] * 3) if keep else \
            dataclasses.replace(p, backward=backward, ready_order=order)
        for f in dataclasses.fields(Profile):
            a, b = getattr(fast, f.name), getattr(slow, f.name)
            assert (np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b), f.name
        assert fast.ready_times.tolist() == slow.ready_times.tolist()
        assert fast.backward_order.tolist() == slow.backward_order.tolist()
        assert fast.compute_time == slow.compute_time and fast.B == slow.B
        assert not fast.backward.flags.writeable
    assert p.with_backward(backward, keep_order=False).compute_time == pytest.approx(12e-3)
    p.with_backward([0.0] * 3).metadata["k"] = 2
    assert p.metadata == {"k": 1}
    with pytest.raises(ValueError, match=r"tensor 'b'"):
        p.with_backward([0.0, -1.0, 0.0])
    with pytest.raises(ValueError, match=r"^ready_order puts tensor 'a'"):
        p.with_backward(backward)
