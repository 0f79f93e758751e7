"""`Target`: a frozen, structurally compared description of one place code can go."""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType, TracebackType
from typing import Any, ClassVar, Protocol, TypeAlias, runtime_checkable

from tessera._private.registry import did_you_mean
from tessera._private.values import (
    FALSE_WORDS,
    TRUE_WORDS,
    is_number,
    legacy_host,
    load_json,
    parse_bool,
    parse_float,
    parse_int,
)
from tessera.errors import TargetError
from tessera.target._kind import KINDS, AttrSpec, AttrType, TargetKind
from tessera.target._syntax import join_items, quote, split_items, tokenize
from tessera.target._tags import TAGS, add_tag

__all__ = ["Target", "TargetLike", "TargetSource", "register_tag"]


@runtime_checkable
class TargetSource(Protocol):
    """Anything that describes itself as one Target, such as a CompilationConfig (a composite
    target); `Target(source)` takes it. A higher layer implements it, so target/ imports none."""

    def to_target(self) -> Target: ...


TargetLike: TypeAlias = "Target | TargetSource | str | Mapping[str, Any]"
_OPTION_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")
_BOOL_WORDS = TRUE_WORDS | FALSE_WORDS
_HOST_KEYS = ("host", "target-host")  # after '_' -> '-'; `target_host` is the older spelling


@dataclass(frozen=True, init=False, repr=False)
class Target:
    """A target kind plus typed attributes (defaults filled in) and an optional host.

    Build one from a string (``"cuda -arch=sm_80"``), a dict or JSON, a tag
    (``"nvidia/a100"``), a tag plus overrides, or another Target. Equality and hashing are
    structural; ``tag`` records provenance only and is not compared.
    """

    kind: TargetKind
    attr_items: tuple[tuple[str, Any], ...]
    host: Target | None
    tag: str | None = field(default=None, compare=False)

    _context: ClassVar[_Context]

    def __init__(
        self,
        value: TargetLike,
        host: TargetLike | None = None,
        *,
        target_host: TargetLike | None = None,
    ) -> None:
        host = legacy_host(host, target_host, TargetError)  # type: ignore[assignment]
        built = _build(value)
        if host is not None:
            built = built.with_host(host)
        _init_fields(self, built.kind, dict(built.attr_items), built.host, built.tag)

    # -- construction helpers ------------------------------------------------------------
    @classmethod
    def _make(
        cls, kind: TargetKind, attrs: dict[str, Any], host: Target | None, tag: str | None
    ) -> Target:
        target = object.__new__(cls)
        _init_fields(target, kind, attrs, host, tag)
        return target

    @classmethod
    def from_json(cls, text: str) -> Target:
        return _from_mapping(_load_json(text), text)

    # -- views ---------------------------------------------------------------------------
    @property
    def attrs(self) -> Mapping[str, Any]:
        """The attributes that are set, defaults included (read-only)."""
        view: Mapping[str, Any] = self.__dict__["_attrs_view"]
        return view

    @property
    def explicit_attrs(self) -> dict[str, Any]:
        """The attributes whose value differs from the kind's default."""
        schema = self.kind.schema
        return {k: v for k, v in self.attr_items if v != schema[k].default}

    @property
    def keys(self) -> tuple[str, ...]:
        keys: tuple[str, ...] = self.attrs.get("keys", self.kind.default_keys)
        return keys

    @property
    def device_type(self) -> str:
        """The device type this target runs on (a backend's chosen `-device`)."""
        device: str = self.attrs.get("device", self.kind.device_type)
        return device

    @property
    def is_external_codegen(self) -> bool:
        return self.kind.is_external_codegen

    # -- relations -----------------------------------------------------------------------
    def is_external_codegen_for(self, device_target: Target) -> bool:
        """True when this backend target can implement code for `device_target`'s device."""
        other = _coerce_target(device_target)
        return (
            self.is_external_codegen
            and not other.is_external_codegen
            and not other.kind.is_composite
            and other.kind.device_type == self.device_type
        )

    def is_specialization_of(self, other: TargetLike) -> bool:
        """Same kind, and every explicitly set attribute (and host) of `other` is equal here."""
        base = _coerce_target(other)
        if base.kind != self.kind:
            return False
        if base.host is not None and base.host != self.host:
            return False
        return all(self.attrs.get(k) == v for k, v in base.explicit_attrs.items())

    def tuning_key(self) -> str:
        """A stable digest of the kind and the attributes that can change generated code.
        Hosts, keys and deployment options are not part of it."""
        payload = json.dumps(_tuning_payload(self), sort_keys=True, separators=(",", ":"))
        return f"{self.kind.name}:{hashlib.sha256(payload.encode()).hexdigest()[:16]}"

    def codegen_key(self) -> str:
        """A stable digest of what can change the generated code itself: the tuning key's
        attributes less the runtime settings (`AttrSpec.runtime`: threads, streams, ...),
        which change how the code runs and what it costs, never the code. So a cpu device's
        `-num-cores`, which becomes each backend's `num-threads`, changes tuning keys (the
        costs) but no code key (what is compiled and kept)."""
        payload = json.dumps(_tuning_payload(self, code_only=True), sort_keys=True,
                             separators=(",", ":"))
        return f"{self.kind.name}:{hashlib.sha256(payload.encode()).hexdigest()[:16]}"

    # -- functional updates --------------------------------------------------------------
    def with_host(self, host: TargetLike | None) -> Target:
        return Target._make(
            self.kind, dict(self.attr_items), _coerce_host(host, str(self)), self.tag
        )

    def without_host(self) -> Target:
        return Target._make(self.kind, dict(self.attr_items), None, self.tag)

    def with_attrs(self, **changes: Any) -> Target:
        """A copy with some attributes changed (names may use '_' for '-'; None unsets
        one); validated."""
        raw: dict[str, Any] = dict(self.explicit_attrs)
        for key, value in changes.items():
            name = self.kind.attr(_norm(key), context=str(self)).name
            if value is None:
                raw.pop(name, None)
            else:
                raw[name] = value
        return _assemble(self.kind, raw, self.host, self.tag, context=str(self))

    # -- serialisation -------------------------------------------------------------------
    def __str__(self) -> str:
        parts = [self.kind.name]
        schema = self.kind.schema
        for name, value in self.explicit_attrs.items():
            parts.append(_render_option(schema[name], value))
        if self.host is not None:
            parts.append("-host=" + quote(str(self.host)))
        return " ".join(parts)

    def __repr__(self) -> str:
        return f"Target({str(self)!r})"

    def to_dict(self, *, include_defaults: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind.name}
        if self.tag is not None:
            out["tag"] = self.tag
        items = dict(self.attr_items) if include_defaults else self.explicit_attrs
        out.update({k: _json_value(v) for k, v in items.items()})
        if self.host is not None:
            out["host"] = self.host.to_dict(include_defaults=include_defaults)
        return out

    def to_json(self, *, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    # -- context -------------------------------------------------------------------------
    def __enter__(self) -> Target:
        _stack().append((self, self if _is_device(self) else None))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        _stack().pop()

    @contextlib.contextmanager
    def scope(self, device: TargetLike | None = None) -> Iterator[Target]:
        """``with backend.scope(device=...):`` makes this the current target and `device`
        (a device target of the same device type) the current device target, as while a
        backend compiles a partition placed on that device."""
        chosen = None if device is None else _coerce_target(device)
        if chosen is not None:
            _check_device_for(self, chosen)
        elif _is_device(self):
            chosen = self
        _stack().append((self, chosen))
        try:
            yield self
        finally:
            _stack().pop()

    @classmethod
    def current(cls, allow_none: bool = True) -> Target | None:
        """The innermost target entered with ``with target:`` in this thread."""
        stack = _stack()
        if stack:
            return stack[-1][0]
        if not allow_none:
            raise TargetError("no current target: enter one with `with Target(...):`")
        return None

    @classmethod
    def current_device(cls, allow_none: bool = True) -> Target | None:
        """The innermost device target in effect in this thread: the `device` of
        ``target.scope(device=...)``, or a device target entered with ``with``."""
        for _, device in reversed(_stack()):
            if device is not None:
                return device
        if not allow_none:
            raise TargetError("no current device target: enter one with "
                              "`with backend_target.scope(device=Target('cpu')):`")
        return None


def _is_device(target: Target) -> bool:
    return not target.is_external_codegen and not target.kind.is_composite


def _check_device_for(target: Target, device: Target) -> None:
    if not _is_device(device):
        raise TargetError(f"{str(device)!r} is not a device target; a scope's device is a "
                          "target such as 'cpu -num-cores=4' or 'cuda -arch=sm_80'")
    if target.kind.is_composite or device.device_type != target.device_type:
        raise TargetError(f"{str(target)!r} runs on device {target.device_type!r}, so it "
                          f"cannot compile for the device target {str(device)!r}; give a "
                          f"{target.device_type} device target")


def _init_fields(
    target: Target, kind: TargetKind, attrs: dict[str, Any], host: Target | None, tag: str | None
) -> None:
    ordered = tuple((spec.name, attrs[spec.name]) for spec in kind.attrs if spec.name in attrs)
    object.__setattr__(target, "kind", kind)
    object.__setattr__(target, "attr_items", ordered)
    object.__setattr__(target, "host", host)
    object.__setattr__(target, "tag", tag)
    object.__setattr__(target, "_attrs_view", MappingProxyType(dict(ordered)))


class _Context(threading.local):
    """Each thread's entered targets, innermost last, each with its device target."""

    def __init__(self) -> None:
        self.stack: list[tuple[Target, Target | None]] = []


Target._context = _Context()


def _stack() -> list[tuple[Target, Target | None]]:
    return Target._context.stack


# -- building ----------------------------------------------------------------------------
def _build(value: object) -> Target:
    if isinstance(value, Target):
        return value
    if isinstance(value, str):
        return _from_string(value)
    if isinstance(value, Mapping):
        return _from_mapping(value, json.dumps(value, default=str))
    if isinstance(value, TargetSource):
        built = value.to_target()
        if not isinstance(built, Target):
            raise TargetError(f"{type(value).__name__}.to_target() returned {built!r}, "
                              "not a Target")
        return built
    raise TargetError(
        f"cannot build a Target from {type(value).__name__} {value!r}; "
        "pass a string, a dict, JSON text, a Target or a CompilationConfig"
    )


def _coerce_target(value: object) -> Target:
    return value if isinstance(value, Target) else _build(value)


def _coerce_host(value: object, context: str) -> Target | None:
    if value is None:
        return None
    host = _coerce_target(value)
    problem = host_problem(host)
    if problem:
        raise TargetError(f"{problem} (in {context!r})")
    return host.without_host()  # hosts do not nest


def host_problem(host: Target) -> str | None:
    """Why `host` cannot be a host (None when it can). The host runs tessera itself and the
    code between partitions, so it is a CPU device target."""
    if host.is_external_codegen or host.kind.is_composite or host.kind.device_type != "cpu":
        return (f"the host must be a CPU device target such as 'cpu' or 'cpu -mcpu=skylake', "
                f"not {str(host)!r}; list {str(host)!r} as a target and give a cpu host")
    return None


def _load_json(text: str) -> object:
    return load_json(text, f"target JSON {text[:80]!r}", TargetError)


def _from_string(source: str) -> Target:
    text = source.strip()
    if not text:
        raise TargetError(
            f"empty target string {source!r}; expected a kind such as 'cpu' or 'cuda -arch=sm_80'"
        )
    if text.startswith("{"):
        return _from_mapping(_load_json(text), source)
    tokens = tokenize(text)
    head = tokens[0]
    if head.is_option:
        raise TargetError(
            f"target string {source!r} starts with the option {head.text!r}; "
            f"put the kind first, e.g. 'cpu {head.text}'"
        )
    kind, base, base_host, tag = _resolve_head(head.text, source)
    raw: dict[str, Any] = {}
    host_raw: object = None
    i = 1
    while i < len(tokens):
        tok = tokens[i]
        if not tok.is_option:
            raise TargetError(
                f"token {tok.text!r} in {source!r} does not start with a dash; "
                "options look like -key=value"
            )
        body = tok.text[2:] if tok.text.startswith("--") else tok.text[1:]
        name, has_value, value = body.partition("=")
        if not _OPTION_NAME.fullmatch(name):
            raise TargetError(f"bad option name {tok.text!r} in {source!r}")
        key = _norm(name)
        is_host = key in _HOST_KEYS
        if not is_host:
            key = kind.attr(key, context=source).name  # an alias becomes the attribute's name
        if has_value:
            i += 1
        else:
            spec = None if is_host else kind.attr(key, context=source)
            nxt = tokens[i + 1] if i + 1 < len(tokens) else None
            if spec is not None and spec.type is AttrType.BOOL:
                if nxt is not None and not nxt.is_option and nxt.text.lower() in _BOOL_WORDS:
                    value, i = nxt.text, i + 2
                else:
                    value, i = "true", i + 1
            elif nxt is not None and (
                not nxt.is_option
                or (spec is not None and spec.type in (AttrType.INT, AttrType.FLOAT)
                    and is_number(nxt.text))
            ):
                value, i = nxt.text, i + 2
            else:
                raise TargetError(
                    f"option '-{key}' in {source!r} needs a value, e.g. -{key}=VALUE"
                )
        if key in raw or (is_host and host_raw is not None):
            raise TargetError(f"option '-{key}' is given more than once in {source!r}")
        if is_host:
            host_raw = value
        else:
            raw[key] = value
    return _assemble(kind, {**base, **raw}, host_raw if host_raw is not None else base_host,
                     tag, context=source)


def _resolve_head(
    name: str, source: str
) -> tuple[TargetKind, dict[str, Any], object, str | None]:
    kind = KINDS.find(name)
    if kind is not None:
        return kind, {}, None, None
    definition = TAGS.find(name)
    if definition is not None:
        base = dict(definition)
        base_host = base.pop("host", None)
        return KINDS.get(base.pop("kind")), base, base_host, name
    known = KINDS.names() + TAGS.names()
    raise TargetError(
        f"unknown target kind or tag {name!r} in {source!r}{did_you_mean(name, known)} "
        f"(kinds: {', '.join(KINDS.names())}; see `tessera targets` for tags)"
    )


def _from_mapping(data: object, source: str) -> Target:
    if not isinstance(data, Mapping):
        raise TargetError(f"a target must be a JSON object or dict, got {source[:80]!r}")
    fields = dict(data)
    for key in fields:
        if not isinstance(key, str):
            raise TargetError(f"target dict keys must be strings, got {key!r} in {source[:80]!r}")
    kind_name = fields.pop("kind", None)
    tag = fields.pop("tag", None)
    host_keys = [k for k in fields if _norm(k) in _HOST_KEYS]
    if len(host_keys) > 1:
        raise TargetError(f"the host is given more than once ({', '.join(host_keys)}) in "
                          f"{source[:80]!r}; give one 'host'")
    host_raw = fields.pop(host_keys[0]) if host_keys else None
    if tag is not None and not isinstance(tag, str):
        raise TargetError(f"'tag' must be a string, got {tag!r} in {source[:80]!r}")
    base: dict[str, Any] = {}
    base_host: object = None
    if kind_name is None:
        if tag is None:
            raise TargetError(f"target dict {source[:80]!r} needs a 'kind' or a 'tag'")
        definition = TAGS.find(tag)
        if definition is None:
            raise TargetError(
                f"unknown tag {tag!r} in {source[:80]!r}{did_you_mean(tag, TAGS.names())}"
                " (a kind goes in 'kind', not 'tag')"
            )
        kind, base, base_host, tag = _resolve_head(tag, source)
    elif isinstance(kind_name, str):
        found = KINDS.find(kind_name)
        if found is None:
            hint = " (it is a tag: use {'tag': ...})" if kind_name in TAGS else ""
            raise TargetError(
                f"unknown target kind {kind_name!r} in {source[:80]!r}"
                f"{did_you_mean(kind_name, KINDS.names())}{hint}"
            )
        kind = found
    else:
        raise TargetError(f"'kind' must be a string, got {kind_name!r} in {source[:80]!r}")
    overrides: dict[str, Any] = {}
    for key, value in fields.items():
        norm = kind.attr(_norm(key), context=source).name  # an alias becomes the name
        if norm in overrides:
            also = f" (as {key!r} too)" if _norm(key) != norm else ""
            raise TargetError(f"attribute {norm!r} is given more than once{also} in "
                              f"{source[:80]!r}; give it once")
        overrides[norm] = value
    return _assemble(kind, {**base, **overrides},
                     host_raw if host_raw is not None else base_host, tag, context=source)


def _assemble(
    kind: TargetKind, raw: dict[str, Any], host_raw: object, tag: str | None, *, context: str
) -> Target:
    values: dict[str, Any] = {}
    for key, value in raw.items():
        spec = kind.attr(key, context=context)
        values[spec.name] = _coerce(spec, value, kind, context)
    for spec in kind.attrs:
        if spec.name not in values and spec.default is not None:
            values[spec.name] = spec.default
    if kind.canonicalizer is not None:
        try:
            values = kind.canonicalizer(values)
        except TargetError as err:
            raise TargetError(f"{err} (in {context!r})") from None
    return Target._make(kind, values, _coerce_host(host_raw, context), tag)


def _coerce(spec: AttrSpec, raw: object, kind: TargetKind, context: str) -> Any:
    try:
        value = _typed(spec, raw)
        if spec.choices is not None and value not in spec.choices:
            if spec.name == "device" and kind.is_external_codegen:
                raise TargetError(
                    f"backend {kind.name!r} cannot serve device {value!r} in {context!r}; "
                    f"it serves: {', '.join(kind.serves)}"
                )
            raise ValueError(
                f"{value!r} is not one of {', '.join(spec.choices)}"
                + did_you_mean(str(value), list(spec.choices))
            )
        if spec.minimum is not None and value < spec.minimum:
            raise ValueError(f"{value} is below the minimum {spec.minimum}")
        problem = spec.check(value) if spec.check is not None else None
        if problem:
            raise ValueError(problem)
        return value
    except TargetError:
        raise
    except ValueError as err:
        raise TargetError(
            f"bad value for option '-{spec.name}' of {kind.name!r} in {context!r}: {err}"
        ) from None


def _typed(spec: AttrSpec, raw: object) -> Any:
    kind = spec.type
    if kind is AttrType.BOOL:
        return parse_bool(raw)
    if kind is AttrType.INT:
        return parse_int(raw)
    if kind is AttrType.FLOAT:
        return parse_float(raw)
    if kind is AttrType.STR:
        if not isinstance(raw, str):
            raise ValueError(f"expected a string, got {raw!r}")
        return raw
    if kind in (AttrType.STR_LIST, AttrType.TARGET_LIST):
        sep = "," if kind is AttrType.STR_LIST else ";"
        if isinstance(raw, str):
            items: list[Any] = split_items(raw, sep)
        elif isinstance(raw, list | tuple):
            items = list(raw)
        else:
            raise ValueError(f"expected a list, got {raw!r}")
        if kind is AttrType.TARGET_LIST:
            return tuple(_coerce_target(item) for item in items)
        for item in items:
            if not isinstance(item, str):
                raise ValueError(f"list items must be strings, got {item!r}")
            if item == "":
                raise ValueError("a list item is empty")
        return tuple(items)
    return _coerce_target(raw)  # AttrType.TARGET


def _norm(name: str) -> str:
    return name.replace("_", "-")


# -- rendering ---------------------------------------------------------------------------
def _render_option(spec: AttrSpec, value: Any) -> str:
    if spec.type is AttrType.BOOL:
        return f"-{spec.name}" if value else f"-{spec.name}=false"
    return f"-{spec.name}=" + quote(_render_value(spec, value))


def _render_value(spec: AttrSpec, value: Any) -> str:
    if spec.type is AttrType.FLOAT:
        return repr(float(value))
    if spec.type is AttrType.STR_LIST:
        return join_items(list(value), ",")
    if spec.type is AttrType.TARGET_LIST:
        return join_items([str(t) for t in value], ";")
    return str(value)


def _json_value(value: Any) -> Any:
    if isinstance(value, Target):
        return value.to_dict()
    if isinstance(value, tuple):
        return [_json_value(v) for v in value]
    return value


def _tuning_payload(target: Target, *, code_only: bool = False) -> dict[str, Any]:
    schema = target.kind.schema
    attrs: dict[str, Any] = {}
    for name, value in target.attr_items:
        if not schema[name].tuning or (code_only and schema[name].runtime):
            continue
        if isinstance(value, Target):
            attrs[name] = _tuning_payload(value, code_only=code_only)
        elif isinstance(value, tuple) and value and isinstance(value[0], Target):
            attrs[name] = [_tuning_payload(v, code_only=code_only) for v in value]
        else:
            attrs[name] = _json_value(value)
    return {"kind": target.kind.name, "attrs": attrs}


def register_tag(name: str, definition: Mapping[str, Any]) -> None:
    """Register `definition` (a target dict with a 'kind') under `name`. It must parse as a
    Target now, so that a mistake shows here rather than where the tag is first used."""
    if KINDS.canonical_name(name) is not None:
        raise TargetError(f"tag {name!r} would be hidden by the target kind of that name; "
                          "choose another name, e.g. 'my/" + name + "'")
    add_tag(name, definition)
    try:
        Target(name)
    except TargetError as err:
        TAGS.unregister(name)
        raise TargetError(f"tag {name!r} is not a valid target: {err}") from None
