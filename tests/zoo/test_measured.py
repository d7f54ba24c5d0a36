"""Measured profiles in the zoo: found by file name, read back exactly, missing ones named."""

from __future__ import annotations

import pytest

from fusionopt import zoo
from fusionopt.model import Profile


def test_measured_profiles_are_found_by_name_and_read_back(tmp_path):
    measured = Profile.from_arrays([4096, 512], [1e-3, 2e-4], [2e-3, 5e-4], ["fc.weight", "fc.bias"],
                                   name="tiny", metadata={"source": "torch.profile_model", "batch": 8})
    measured.write(tmp_path / "tiny-h100-b8.json")
    measured.write(tmp_path / "notes.json")            # not <model>-<hardware>-b<batch>: ignored
    (tmp_path / "tiny-h100-b8.txt").write_text("x")
    assert zoo.measured_profiles(tmp_path) == {("tiny", "h100", 8): tmp_path / "tiny-h100-b8.json"}
    assert zoo.measured_profile("Tiny", hardware="H100", batch=8, directory=tmp_path) == measured
    with pytest.raises(ValueError, match=r"no measured profile of 'tiny' on 'h100' with batch 16; "
                                         r"measured: tiny on h100 \(batch 8\)"):
        zoo.measured_profile("tiny", hardware="h100", batch=16, directory=tmp_path)


def test_an_empty_or_missing_folder_lists_nothing(tmp_path):
    assert zoo.measured_profiles(tmp_path / "absent") == {}
    with pytest.raises(ValueError, match="measured: none yet"):
        zoo.measured_profile("resnet50", hardware="h100", batch=32, directory=tmp_path)


def test_model_names_with_dashes_parse(tmp_path):
    (tmp_path / "mobilenet-v2-h100-b32.json").write_text("{}")
    assert list(zoo.measured_profiles(tmp_path)) == [("mobilenet-v2", "h100", 32)]
