"""Hypothesis strategies that build valid target dicts for any registered kind."""

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from hypothesis import strategies as st

from tessera.target import KINDS, AttrSpec, AttrType, TargetKind, register_kind

# Any text: spaces, quotes, commas, semicolons, backslashes, '=' and unicode included.
TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
               max_size=12)
ITEM = TEXT.filter(bool)

_SPECIAL: dict[tuple[str, str], st.SearchStrategy[Any]] = {
    ("cuda", "arch"): st.from_regex(r"sm_[1-9][0-9]{1,2}a?", fullmatch=True),
    ("tvm", "opt-level"): st.integers(0, 3),
    ("onnxruntime", "matmul-accuracy"): st.integers(0, 4),
    **{(kind, "int8-smoothquant"): st.sampled_from(["off", "0", "0.15", "0.5", "1"])
       for kind in ("onnxruntime", "openvino")},
    ("cpu", "mattr"): st.lists(st.tuples(st.sampled_from("+-"), ITEM).map("".join), max_size=4),
}


def simple_device() -> st.SearchStrategy[dict[str, Any]]:
    return st.builds(
        lambda mcpu, cores: {"kind": "cpu", **({"mcpu": mcpu} if mcpu is not None else {}),
                             **({"num-cores": cores} if cores else {})},
        st.none() | TEXT, st.none() | st.integers(1, 512),
    )


def value_for(kind: TargetKind, spec: AttrSpec) -> st.SearchStrategy[Any]:
    special = _SPECIAL.get((kind.name, spec.name))
    if special is not None:
        return special
    if spec.choices:
        return st.sampled_from(spec.choices)
    if spec.type is AttrType.BOOL:
        return st.booleans()
    if spec.type is AttrType.INT:
        low = spec.minimum if spec.minimum is not None else -(2**40)
        return st.integers(low, 2**40)
    if spec.type is AttrType.FLOAT:
        return st.floats(allow_nan=False, allow_infinity=False, width=64)
    if spec.type is AttrType.STR:
        return TEXT
    if spec.type is AttrType.STR_LIST:
        return st.lists(ITEM, max_size=4)
    if spec.type is AttrType.TARGET:
        return simple_device()
    backend = st.sampled_from(["onnxruntime", "openvino", "torch", "reference"])
    return st.lists(backend | simple_device(), min_size=1, max_size=3)  # TARGET_LIST


@st.composite
def target_dicts(draw: st.DrawFn, kind_name: str) -> dict[str, Any]:
    kind = KINDS.get(kind_name)
    chosen = draw(st.lists(st.sampled_from(kind.attrs), unique=True, max_size=len(kind.attrs)))
    data: dict[str, Any] = {"kind": kind_name}
    for spec in chosen:
        data[spec.name] = draw(value_for(kind, spec))
    if kind.is_composite and "devices" not in data:
        data["devices"] = draw(value_for(kind, kind.schema["devices"]))
    if draw(st.booleans()):
        data["host"] = draw(simple_device())
    return data


ALL_TYPES_KIND = "test-all-types"  # a test-only kind: no real kind has a float attribute yet


@contextmanager
def all_types_kind() -> Iterator[TargetKind]:
    kind = register_kind(
        ALL_TYPES_KIND, device_type="cpu", doc="test-only kind with every attribute type",
        attrs=tuple(AttrSpec("a-" + t.name.lower().replace("_", "-"), t, doc=f"a {t.value}")
                    for t in AttrType),
    )
    try:
        yield kind
    finally:
        KINDS.unregister(ALL_TYPES_KIND)
