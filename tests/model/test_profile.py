"""Profile: validation with errors that name the tensor, derived figures, JSON."""

import json
import math

import numpy as np
import pytest

from fusionopt.model import Profile


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
