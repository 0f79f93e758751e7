"""Runtime-settings variants of whole-model plans in the end-to-end race: what ONNX Runtime
and OpenVINO propose per objective and concurrency, that no variant ever changes what the
user set, that the thread policy keeps a variant's settings, that the target a variant came
from is recovered (so the guard bans it too), and which rival plans get variants."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tessera.backends import Backend
from tessera.backends._threads import ThreadPolicy, core_budget
from tessera.config import Objective
from tessera.placement import Plan
from tessera.placement.record import Rival
from tessera.placement.record._plan import Partition
from tessera.placement.search._settings import (
    MAX_CHOICES,
    setting_choices,
    settings_base,
    with_setting_choices,
)
from tessera.placement.search._threads import base_target
from tessera.target import AttrSpec, AttrType, Target

from ..registering import registered

objectives = st.builds(Objective, st.sampled_from(["latency", "throughput"]),
                       st.sampled_from([50, 90, 99]), st.integers(1, 64))
# targets whose user-set attributes are any mix of the settings a variant may vary and others
ort_targets = st.fixed_dictionaries({}, optional={
    "opt-level": st.sampled_from(["disable", "basic", "extended", "all"]),
    "spinning": st.booleans(), "num-threads": st.integers(0, 8),
    "execution-mode": st.sampled_from(["sequential", "parallel"]),
}).map(lambda attrs: Target("onnxruntime").with_attrs(**attrs))
ov_targets = st.fixed_dictionaries({}, optional={
    "precision": st.sampled_from(["f32", "bf16", "f16", "int4"]), "cpu-pinning": st.booleans(),
    "dq-group-size": st.sampled_from([0, 64, 256]),
    "num-streams": st.integers(1, 4), "num-threads": st.integers(0, 8),
    "performance-hint": st.sampled_from(["latency", "throughput"]),
}).map(lambda attrs: Target("openvino").with_attrs(**attrs))


def test_what_onnx_runtime_and_openvino_propose() -> None:
    ort, ov = Target("onnxruntime"), Target("openvino")
    assert setting_choices(ort, Objective()) == [
        Target("onnxruntime -execution-mode=parallel")]
    assert setting_choices(ov, Objective()) == []
    share = max(1, core_budget() // 2)
    assert setting_choices(ort, Objective("throughput", 50, 2)) == [
        Target(f"onnxruntime -num-threads={n}") for n in dict.fromkeys((1, share))]
    streams = min(2, core_budget())
    assert setting_choices(ov, Objective("throughput", 50, 2)) == (
        [Target(f"openvino -performance-hint=throughput -num-streams={streams}")]
        if streams > 1 else [])
    # an int8 target's variants keep its precision (they share its int8 form)
    assert setting_choices(Target("openvino -precision=int8"), Objective("throughput", 50, 2)
                            ) == ([Target(f"openvino -precision=int8 -performance-hint=throughput "
                                          f"-num-streams={streams}")] if streams > 1 else [])
    assert setting_choices(Target("reference"), Objective()) == []


def test_a_weight_only_form_races_larger_groups_of_its_activation_quantization() -> None:
    weights = Target("openvino -precision=int8 -int8-recipe=weights")
    assert setting_choices(weights, Objective()) == [
        weights.with_attrs(**{"dq-group-size": 256}), weights.with_attrs(**{"dq-group-size": 128})]
    assert setting_choices(Target("openvino -precision=int4"), Objective())[0] == Target(
        "openvino -precision=int4 -dq-group-size=256")
    # the setting acts on compressed weights alone: elsewhere it is not spelled
    assert Target("openvino -precision=int8 -dq-group-size=256") == Target(
        "openvino -precision=int8")
    assert Target("openvino -precision=int4 -dq-group-size=32") == Target(
        "openvino -precision=int4")
    assert settings_base(Target("openvino -precision=int4 -dq-group-size=256")) == Target(
        "openvino -precision=int4")


@given(st.one_of(ort_targets, ov_targets), objectives)
def test_a_variant_never_changes_what_the_user_set(target: Target, objective: Objective
                                                   ) -> None:
    variants = setting_choices(target, objective)
    assert len(variants) <= MAX_CHOICES and target not in variants
    for variant in variants:
        assert all(variant.attrs[k] == v for k, v in target.explicit_attrs.items())
        # the target it came from is the variant less its settings: the guard bans both
        assert settings_base(variant) == target
        assert base_target(str(variant)) == str(target)
    varied = ("num-threads", "execution-mode", "performance-hint", "num-streams",
              "dq-group-size")
    if any(k in target.explicit_attrs for k in varied):
        assert variants == []  # a target whose settings the user set is raced as set


@given(st.one_of(ort_targets, ov_targets), objectives,
       st.sampled_from(["native", "shared"]), st.integers(1, 32))
def test_the_thread_policy_keeps_a_variants_settings(
        target: Target, objective: Objective, policy: Any, budget: int) -> None:
    for variant in setting_choices(target, objective):
        applied = ThreadPolicy(policy, budget).apply(variant)
        assert all(applied.attrs[k] == v for k, v in variant.explicit_attrs.items())


def test_base_targets_of_one_thread_variants_and_user_targets() -> None:
    assert base_target("onnxruntime -num-threads=1") == "onnxruntime"
    assert base_target("onnxruntime -opt-level=basic") == "onnxruntime -opt-level=basic"
    assert base_target("openvino -performance-hint=throughput -num-streams=2 -precision=f16") \
        == "openvino -precision=f16"
    assert base_target("torch -num-threads=1") == "torch"


class _Careless(Backend):
    """TEST-ONLY backend whose proposals also touch what they must not."""

    setting_attrs = ("knob",)

    def setting_choices(self, target: Target, objective: str, concurrency: int
                         ) -> list[Target]:
        return [target.with_attrs(knob=2), target.with_attrs(knob=3, other=1),
                target, target.with_attrs(knob=2), target.with_attrs(knob=4),
                target.with_attrs(knob=5), target.with_attrs(knob=6)]


def test_only_true_settings_variants_are_raced_and_few() -> None:
    attrs = (AttrSpec("knob", AttrType.INT, 0), AttrSpec("other", AttrType.INT, 0))
    with registered("test-careless", _Careless(), attrs=attrs):
        found = setting_choices(Target("test-careless"), Objective())
        assert [str(t) for t in found] == [
            "test-careless -knob=2", "test-careless -knob=4", "test-careless -knob=5"]
        assert setting_choices(Target("test-careless -knob=1"), Objective()) == []


def _plan(*targets: str) -> Plan:
    parts = tuple(Partition(t, (f"n{i}",), ("x",), (f"v{i}",), 0.1)
                  for i, t in enumerate(targets))
    return Plan(parts, "greedy")


def test_whole_model_plans_get_variants_each_target_once() -> None:
    named = {"collage": _plan("onnxruntime", "openvino"), "greedy": _plan("onnxruntime"),
             "only onnxruntime": _plan("onnxruntime"), "only reference": _plan("reference"),
             "only onnxruntime -num-threads=2": _plan("onnxruntime -num-threads=2")}
    rivals = {Rival.parse(name): plan for name, plan in named.items()}
    raced = with_setting_choices(rivals, Objective())
    assert [str(r) for r in raced] == [*named, "only onnxruntime -execution-mode=parallel"]
    variant = raced[Rival.parse("only onnxruntime -execution-mode=parallel")]
    assert [str(p.target) for p in variant.partitions] == [
        "onnxruntime -execution-mode=parallel"]
    assert variant.partitions[0].nodes == named["greedy"].partitions[0].nodes
    assert variant.cost_ms == named["greedy"].cost_ms  # modelled as the plan it varies
