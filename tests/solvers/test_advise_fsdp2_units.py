"""FSDP2 advice on models whose names do not follow the block pattern: every unit advised is
one FSDP2 can wrap (whole modules), the root holds what no call can wrap, and a profile
of names without dots gets the root alone."""

import pytest

from fusionopt import zoo
from fusionopt.model import FullySharded, Problem, Profile, simulate
from fusionopt.solvers import solve
from fusionopt.advice import OverMemoryCap, fsdp2_advice, fsdp2_atoms, fsdp2_plan_of


def vit():
    return zoo.profile("vit-b16", batch=16)


def flat(profile: Profile) -> Profile:
    """The profile with every name's dots made underscores: tensors of the model itself."""
    doc = profile.to_dict()
    for tensor in doc["tensors"]:
        tensor["name"] = tensor["name"].replace(".", "_")
    if doc.get("ready_order") is not None:
        doc["ready_order"] = [name.replace(".", "_") for name in doc["ready_order"]]
    return Profile.from_dict(doc)


def test_vit_atoms_keep_each_attention_whole_and_leave_the_embeddings_to_the_root():
    # torchvision's ViT-B/16: conv_proj.weight, conv_proj.bias, class_token (the model's own)
    # and encoder.pos_embedding (the encoder's own, beside its layers) go to the root's first
    # part; by modules, each of the 12 layers of 12 tensors (from 4 + 12 k) has five atoms: ln_1 (2),
    # self_attention (in_proj_weight and in_proj_bias beside out_proj's two: 4), ln_2 (2),
    # mlp.0 (2), mlp.3 (2); then encoder.ln and heads.head.
    profile = vit()
    assert profile.names[2] == "class_token" and profile.names[3] == "encoder.pos_embedding"
    assert profile.names[6] == "encoder.layers.encoder_layer_0.self_attention.in_proj_weight"
    modules = [4 + 12 * k + offset for k in range(12) for offset in (0, 2, 6, 8, 10)]
    assert fsdp2_atoms(profile, "module") == ([0, *modules, 148, 150, 152], True)
    # Whole blocks: each encoder_layer_k of the encoder's Sequential is one atom.
    assert fsdp2_atoms(profile, "block") == ([0, *[4 + 12 * k for k in range(12)], 148, 150, 152], True)


def test_vit_advice_wraps_whole_modules_and_builds_what_it_reports():
    profile = vit()
    for workers, net, cap in ((64, "100gb-ib", None), (1024, "10gbe", 300e6)):
        problem = Problem(profile, pattern=FullySharded.from_network(net, workers, memory_cap=cap))
        advice = fsdp2_advice(problem)
        s = advice.settings
        # What FSDP2 builds from the calls is the plan simulated, with the T and peak reported.
        assert fsdp2_plan_of(profile, s.units, s.reshard_after_forward, s.forward_prefetch,
                             s.backward_prefetch) == s.plan
        timeline = simulate(problem, s.plan)
        assert (timeline.iteration_time, int(timeline.peak_memory)) == (s.iteration_time, s.peak_memory)
        assert cap is None or s.peak_memory <= cap
        default = solve(problem, "fsdp2")
        if cap is None or default.timeline.peak_memory <= cap:
            assert s.iteration_time <= default.iteration_time * (1 + 1e-9)
        # Each attention's input projection lies in one unit with its out_proj; the model's and
        # the encoder's own tensors lie in the root's parts.
        bounds = s.plan.bounds.tolist()

        def unit(i):
            return max(j for j in range(len(bounds) - 1) if bounds[j] <= i)

        for i, name in enumerate(profile.names):
            if name.endswith("self_attention.in_proj_weight"):
                assert profile.names[i + 3].endswith("self_attention.out_proj.bias")
                assert unit(i) == unit(i + 3), name
        assert s.plan.root and unit(2) == unit(3) == 0
        assert s.units[-1] == [""] and not any(m in ("", "encoder") for call in s.units[:-1] for m in call)


def test_names_without_dots_get_the_root_alone():
    # Every tensor is the model's own: FSDP2 can build one plan, fully_shard(model), which
    # is its default here too.
    profile = flat(zoo.profile("resnet50", batch=16))
    assert fsdp2_atoms(profile, "module") == ([0, profile.n], None)
    assert fsdp2_atoms(profile, "block") == ([0, profile.n], None)
    problem = Problem(profile, pattern=FullySharded.from_network("100gb-ib", 64))
    for atoms in ("block", "module"):
        advice = fsdp2_advice(problem, atoms)
        assert advice.settings.units == [[""]]
        assert advice.settings.code().splitlines() == ["fully_shard(model, reshard_after_forward=False)"]
        assert advice.settings.iteration_time == solve(problem, "fsdp2").iteration_time
    # A cap below that one unit's peak: no FSDP2 setting fits, which is said, not crashed on.
    cap = 0.5 * advice.settings.peak_memory
    with pytest.raises(OverMemoryCap, match="memory cap"):
        fsdp2_advice(Problem(profile, pattern=FullySharded.from_network("100gb-ib", 64, memory_cap=cap)))


def test_gpt2_advice_meets_a_cap_its_defaults_exceed():
    # 330 MB: FSDP2's defaults (the root keeps wte, 154 MB, whole) peak over it (343 MB); units
    # of whole blocks with wte a unit of its own, resharded, fit (312 MB). wte's parameters and
    # gradient, 309 MB, are whole together during its backward, which takes time.
    problem = Problem(zoo.profile("gpt2"), pattern=FullySharded.from_network("100gb-ib", 64, memory_cap=330e6))
    assert solve(problem, "fsdp2").timeline.peak_memory > 330e6
    advice = fsdp2_advice(problem)
    assert not advice.default_feasible and not advice.defaults and advice.atoms == "block"
    assert advice.settings.peak_memory <= 330e6
    assert ["wte"] in advice.settings.units
    assert simulate(problem, advice.settings.plan).peak_memory == advice.settings.peak_memory
    assert advice.lower_bound <= advice.settings.iteration_time
