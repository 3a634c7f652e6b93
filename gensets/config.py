"""YAML -> frozen, validated config objects.

Every error names the file, the line and the dotted key, in one line::

    configs/x.yaml:12: generator.steps: expected int, got str 'many'

A config class is a frozen dataclass; its field types say what is accepted (str, int, float, bool,
None, Literal, tuple[T, ...], dict[str, T], nested dataclasses and unions of those). A class may define
``validate(base_dir)``: ``base_dir`` is the config file's folder, where its relative paths lead, or None for
a workspace's frozen copy, whose files were checked and read into it when it was frozen (they lie beside the
config it was built from, not beside the workspace).

Every YAML gensets reads (configs, ``--set`` values, a dataset card's header) goes through
:class:`BoundedLoader`: aliases may not expand into themselves nor to more than
:attr:`BoundedLoader.MAX_ALIAS_NODES` nodes ("billion laughs"), and a mapping or list may carry no tag.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union

import yaml

from .errors import ConfigError, did_you_mean

_PLAIN_TAGS = ("tag:yaml.org,2002:map", "tag:yaml.org,2002:seq")


class BoundedLoader(yaml.SafeLoader):
    """yaml.SafeLoader with its aliases bounded while the document is composed (composing never expands an
    alias, so a bomb is caught before anything is built from it): an alias inside the node it names (a loop)
    is refused, and so are aliases that stand for more than ``MAX_ALIAS_NODES`` nodes in all."""

    MAX_ALIAS_NODES = 10_000

    def compose_document(self):
        self._size: dict[int, int] = {}  # id(node) -> how many nodes it stands for, aliases expanded
        self._open: set[str] = set()  # anchors of the collections being composed
        self._aliased = 0
        return super().compose_document()

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            if event.anchor in self._open:
                raise yaml.composer.ComposerError(
                    None, None, f"alias *{event.anchor} is inside the node it names (an alias loop)", event.start_mark)
            node = super().compose_node(parent, index)
            self._aliased += self._size.get(id(node), 1)
            if self._aliased > self.MAX_ALIAS_NODES:
                raise yaml.composer.ComposerError(
                    None, None, f"aliases expand to more than {self.MAX_ALIAS_NODES} nodes (an alias bomb?)",
                    event.start_mark)
            return node
        if event.anchor is not None:
            self._open.add(event.anchor)
        node = super().compose_node(parent, index)
        self._open.discard(event.anchor)
        children = node.value if isinstance(node, yaml.SequenceNode) else \
            [n for kv in node.value for n in kv] if isinstance(node, yaml.MappingNode) else []
        self._size[id(node)] = 1 + sum(self._size.get(id(c), 1) for c in children)
        return node


def safe_load(text: str):
    """``yaml.safe_load`` through :class:`BoundedLoader` (for YAML that is not a config, e.g. a card's header)."""
    return yaml.load(text, Loader=BoundedLoader)  # noqa: S506 - a SafeLoader


class _Node:
    """A YAML value together with the line it came from (1-based)."""

    __slots__ = ("value", "line", "key_lines")

    def __init__(self, value: Any, line: int, key_lines: dict[str, int] | None = None):
        self.value = value
        self.line = line
        self.key_lines = key_lines or {}


def _convert(node: yaml.Node) -> _Node:
    line = node.start_mark.line + 1
    if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)) and node.tag not in _PLAIN_TAGS:
        raise ConfigError(f"{{file}}:{line}: tag {node.tag!r} is not allowed here (plain YAML only)")
    if isinstance(node, yaml.MappingNode):
        out: dict[str, _Node] = {}
        key_lines: dict[str, int] = {}
        for k, v in node.value:
            key = yaml.safe_load(yaml.serialize(k)) if not isinstance(k, yaml.ScalarNode) else k.value
            if str(key) in out:
                raise ConfigError(f"{{file}}:{k.start_mark.line + 1}: duplicate key '{key}'")
            child = _convert(v)
            key_lines[str(key)] = child.line = k.start_mark.line + 1  # errors point at the key's line
            out[str(key)] = child
        return _Node(out, line, key_lines)
    if isinstance(node, yaml.SequenceNode):
        return _Node([_convert(v) for v in node.value], line)
    # scalars: let the safe loader resolve int/float/bool/null
    return _Node(yaml.safe_load(yaml.serialize(node)), line)


def _read_regular(path: Path) -> str:
    """A config file's text, when it is a regular file: a FIFO or a device is refused instead of blocking (checked
    on the descriptor, opened non-blocking; gensets.safety does the same for data, in a layer above this one)."""
    import os
    import stat

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ConfigError(f"{path}: not a regular file (a FIFO, a device or a folder); refusing to read it")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb") as f:
            fd = -1
            return f.read().decode("utf-8")
    finally:
        if fd >= 0:
            os.close(fd)


def _yaml_problem(e: yaml.YAMLError) -> str:
    """What a YAML error says, in one line (a reader error's own text spans two)."""
    if isinstance(e, yaml.reader.ReaderError):  # a character YAML does not allow (a NUL, a control character)
        return f"character {e.character!r} is not allowed ({e.reason})"
    return " ".join(str(getattr(e, "problem", None) or e).split())


def read_yaml(path: str | Path) -> _Node:
    path = Path(path)
    try:
        text = _read_regular(path)
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read config: {e}") from None
    try:
        root = yaml.compose(text, Loader=BoundedLoader)
        if root is None:
            raise ConfigError(f"{path}:1: the config is empty")
        return _convert(root)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = mark.line + 1 if mark else 1
        if isinstance(e, yaml.reader.ReaderError):
            line = text.count("\n", 0, e.position) + 1
        raise ConfigError(f"{path}:{line}: invalid YAML: {_yaml_problem(e)}") from None
    except RecursionError:
        raise ConfigError(f"{path}: invalid YAML: nested too deeply") from None
    except ConfigError as e:
        raise ConfigError(str(e).replace("{file}", str(path))) from None


def _plain(node: _Node) -> Any:
    if isinstance(node.value, dict):
        return {k: _plain(v) for k, v in node.value.items()}
    if isinstance(node.value, list):
        return [_plain(v) for v in node.value]
    return node.value


def _type_name(tp: Any) -> str:
    if isinstance(tp, type):
        return tp.__name__
    return str(tp).replace("typing.", "")


class _Loader:
    def __init__(self, source: str, base_dir: Path | None):
        self.source = source
        self.base_dir = base_dir

    def fail(self, node: _Node | int | str, key: str, msg: str) -> typing.NoReturn:
        where = f"{key}: " if key else ""
        line = node if isinstance(node, (int, str)) else node.line
        at = line if isinstance(line, str) else f"{self.source}:{line}"  # a str: a --set override
        raise ConfigError(f"{at}: {where}{msg}")

    def build(self, tp: Any, node: _Node, key: str) -> Any:
        origin = typing.get_origin(tp)
        args = typing.get_args(tp)
        v = node.value
        if tp is Any:
            return _plain(node)
        if origin in (Union, types.UnionType):
            if v is None and type(None) in args:
                return None
            errors = []
            for alt in args:
                if alt is type(None):
                    continue
                try:
                    return self.build(alt, node, key)
                except ConfigError as e:
                    errors.append(e)
            deeper = [e for e in errors if key and (f"{key}[" in str(e) or f"{key}." in str(e))]
            if len(errors) == 1 or len(deeper) == 1:  # the one alternative whose shape fits: its own error
                raise (deeper or errors)[0]
            self.fail(node, key, f"expected {' or '.join(_type_name(a) for a in args)}, got {_describe(v)}")
        if origin is Literal:
            if v in args:
                return v
            self.fail(node, key, f"expected one of {', '.join(repr(a) for a in args)}, got {_describe(v)}")
        if origin is typing.Annotated:  # Annotated[str, REGISTRY]: a name registered there (e.g. a strategy)
            registry = args[1]
            if isinstance(v, str) and v in registry:
                return v
            self.fail(node, key, f"expected one of {', '.join(repr(a) for a in registry.names())}, "
                      f"got {_describe(v)}")
        if dataclasses.is_dataclass(tp):
            return self.build_dataclass(tp, node, key)
        if origin in (tuple, list):
            if not isinstance(v, list):
                self.fail(node, key, f"expected a list, got {_describe(v)}")
            item = args[0] if args else Any
            return tuple(self.build(item, n, f"{key}[{i}]") for i, n in enumerate(v))
        if origin is dict:
            if not isinstance(v, dict):
                self.fail(node, key, f"expected a mapping, got {_describe(v)}")
            vt = args[1] if len(args) == 2 else Any
            if args and typing.get_origin(args[0]) is typing.Annotated:  # keys named in a registry
                for k in v:
                    self.build(args[0], _Node(k, node.key_lines.get(k, node.line)), f"{key}.{k}")
            return types.MappingProxyType({k: self.build(vt, n, f"{key}.{k}") for k, n in v.items()})
        if tp is float:
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                try:
                    return float(v)
                except OverflowError:  # an integer of hundreds of digits
                    self.fail(node, key, f"expected a number, got an integer of {v.bit_length()} bits, too large")
        elif tp is int:
            if isinstance(v, int) and not isinstance(v, bool):
                return v
        elif tp is str:
            if isinstance(v, str):
                bad = control_char(v)
                if bad:
                    self.fail(node, key, f"control character {bad} in {v[:80]!r}; refusing it (it would reach "
                              "the dataset card and the terminal)")
                return v
        elif tp is bool:
            if isinstance(v, bool):
                return v
        elif tp is type(None):
            if v is None:
                return None
        else:  # pragma: no cover - a programming error in a config class
            raise TypeError(f"unsupported config type {tp!r}")
        self.fail(node, key, f"expected {_type_name(tp)}, got {_describe(v)}")

    def build_dataclass(self, cls: type, node: _Node, key: str) -> Any:
        if not isinstance(node.value, dict):
            self.fail(node, key, f"expected a mapping, got {_describe(node.value)}")
        hints = typing.get_type_hints(cls, include_extras=True)
        fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
        kwargs = {}
        for name, child in node.value.items():
            if name not in fields:
                known = ", ".join(sorted(fields))
                self.fail(node.key_lines[name], _join(key, name),
                          f"unknown key{did_you_mean(name, fields)} (known keys here: {known})")
            kwargs[name] = self.build(hints[name], child, _join(key, name))
        for name, f in fields.items():
            if name not in kwargs and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                self.fail(node, _join(key, name), "required key is missing")
        try:
            obj = cls(**kwargs)
        except (ValueError, TypeError) as e:
            self.fail(node, key, str(e))
        check = getattr(obj, "validate", None)
        if check is not None:
            try:
                check(self.base_dir)
            except ValueError as e:
                # a validator may name a sub-key as "sub.key: message"
                sub, sep, msg = str(e).partition(": ")
                if sep and sub in node.value:
                    self.fail(node.key_lines[sub], _join(key, sub), msg)
                self.fail(node, key, str(e))
        return obj


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _describe(v: Any) -> str:
    if isinstance(v, dict):
        return "a mapping"
    if isinstance(v, list):
        return "a list"
    if v is None:
        return "nothing (null)"
    return f"{type(v).__name__} {v!r}"


def apply_overrides(node: _Node, overrides: typing.Iterable[str]) -> None:
    """Set ``dotted.key=VALUE`` (VALUE read as YAML) in a read config before it is validated, e.g.
    ``labels=[tench, goldfish]``; errors in an overridden value name ``--set`` instead of a line."""
    for item in overrides:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key or any(not p for p in key.split(".")):
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. --set seed=1")
        try:
            composed = yaml.compose(text, Loader=BoundedLoader)
            value = _convert(composed) if composed is not None else _Node(None, 0)
        except yaml.YAMLError as e:
            raise ConfigError(f"--set {key}: invalid YAML value {text[:200]!r} ({_yaml_problem(e)})") \
                from None
        except RecursionError:
            raise ConfigError(f"--set {key}: invalid YAML value: nested too deeply") from None
        except ConfigError as e:
            raise ConfigError(f"--set {key}: {str(e).partition(': ')[2]}") from None
        _mark(value, "--set")
        parent = node
        parts = key.split(".")
        for i, part in enumerate(parts[:-1]):
            if not isinstance(parent.value, dict):
                raise ConfigError(f"--set {key}: {'.'.join(parts[:i]) or 'the config'} is not a mapping")
            child = parent.value.get(part)
            if child is None or not isinstance(child.value, dict):
                child = parent.value[part] = _Node({}, "--set")  # type: ignore[arg-type]
                parent.key_lines[part] = "--set"  # type: ignore[assignment]
            parent = child
        if not isinstance(parent.value, dict):
            raise ConfigError(f"--set {key}: {'.'.join(parts[:-1]) or 'the config'} is not a mapping")
        parent.value[parts[-1]] = value
        parent.key_lines[parts[-1]] = "--set"  # type: ignore[assignment]


def _mark(node: _Node, where: str) -> None:
    node.line = where  # type: ignore[assignment]
    node.key_lines = dict.fromkeys(node.key_lines, where)
    if isinstance(node.value, (dict, list)):
        for child in node.value.values() if isinstance(node.value, dict) else node.value:
            _mark(child, where)


def load_config(cls: type, path: str | Path, data: _Node | None = None, *, frozen: bool = False) -> Any:
    """Load and validate ``path`` as an instance of the dataclass ``cls``; ``frozen``: a workspace's frozen
    copy (validators get ``base_dir=None`` and leave the files it was built from alone)."""
    path = Path(path)
    node = data if data is not None else read_yaml(path)
    return _Loader(str(path), None if frozen else path.resolve().parent).build_dataclass(cls, node, "")


def to_dict(obj: Any) -> Any:
    """A config object as plain data (for writing the resolved config and fingerprinting)."""
    if dataclasses.is_dataclass(obj):  # a field marked omit_default is left out while at its default: adding
        # such an optional key to a config class keeps the fingerprints of the builds that do not use it
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)
                if not (f.metadata.get("omit_default") and getattr(obj, f.name) == f.default)}
    if isinstance(obj, (tuple, list)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, (dict, types.MappingProxyType)):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj


def fingerprint(obj: Any) -> str:
    """A short content hash of a config: it names the build."""
    blob = json.dumps(to_dict(obj), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


# ------------------------------------------------------------------ values from the command line and from data
MAX_COUNT = 100_000  # a count a config asks for (images per class, per pair, ...): more is a typo, not a plan


def check_count(name: str, value: int, low: int = 1, high: int = MAX_COUNT) -> None:
    """ValueError ``"name: ..."`` (a validator's form: the loader names file:line) unless ``low <= value <=
    high``: a typo'd ``1000000000`` is refused before anything is planned, not after minutes of it."""
    if not low <= value <= high:
        raise ValueError(f"{name}: must be between {low} and {high:,}, got {value:,}")


# The images one build may plan in all: `gensets build` refuses a config that asks for more before planning anything
# (each builder counts its config's with Builder.planned_images). The largest config of the papers,
# configs/failure_modes.yaml, asks for at most 5,625,000 (20 labels x 31,250 baseline images, and 20 labels x at most
# 8 modes x 31,250 regenerated); configs/imagenet_d.yaml 61,811; configs/genbench.yaml 3,840 (384,000 for ImageNet's
# 1,000 classes). A plan costs memory and time: recognition's ~560 bytes and ~25 us an image (800,000 images:
# 450 MB, 20 s), so 10 million is a plan of about 6 GB and minutes; more is a typo or several builds.
MAX_IMAGES = 10_000_000


def _key_line(node: _Node, key: str) -> int | str | None:
    """The line of dotted ``key`` (``generate[0].images_per_category``) in a config's tree: the deepest part of it
    that the YAML holds (None when it holds none: a default); ``"--set"`` for an override."""
    line = None
    for part in re.findall(r"[^.\[\]]+", key):
        v = node.value
        if isinstance(v, dict) and part in v:
            line, node = node.key_lines.get(part, v[part].line), v[part]
        elif isinstance(v, list) and part.isdigit() and int(part) < len(v):
            node = v[int(part)]
            line = node.line
        else:
            break
    return line


def check_planned(terms, source: str | Path, node: _Node, limit: int = MAX_IMAGES) -> None:
    """ConfigError, one line naming ``source:line``, the key and its value, when ``terms`` (a builder's
    ``planned_images``: a sum of products of ``(key, count)`` factors) come to more than ``limit`` images."""
    import math

    sizes = [math.prod(n for _, n in t) for t in terms]
    total = sum(sizes)
    if total <= limit:
        return
    term = terms[sizes.index(max(sizes))]
    key, value = max(term, key=lambda f: f[1])  # the largest count of the largest term: likely the typo
    formula = " x ".join(f"{k} {n:,}" for k, n in term) + (f", and {len(terms) - 1} more" if len(terms) > 1 else "")
    line = _key_line(node, key)
    at = line if isinstance(line, str) else f"{source}:{line}" if line else str(source)
    raise ConfigError(f"{at}: {key}: {value:,} makes {total:,} images in all ({formula}), more than the "
                      f"{limit:,} one build may plan; a typo? (a larger set: several builds)")


# The characters no string gensets reads may hold (a config's, a class list's, a record's: gensets.schemas uses
# this one definition too): C0 and C1 controls, DEL, the line / paragraph separators and the bidirectional overrides
# and isolates: what moves a terminal's cursor, colours it, or reorders what a reader of a card sees
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def control_char(text: str) -> str | None:
    """The first forbidden character of ``text`` (:data:`CONTROL`: NUL, newline, ESC, a bidi override such as
    U+202E, ...) as ``U+XXXX``; None when it has none. Such a character in a name would reach a card or a
    terminal."""
    m = CONTROL.search(text)
    return f"U+{ord(m.group()):04X}" if m else None


def _number(kind: type, low, high=None, what: str = ""):
    import argparse

    def parse(text: str):
        try:
            v = kind(text)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if v != v or v in (float("inf"), float("-inf")) or v < low or (high is not None and v > high):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return v

    parse.__name__ = what  # argparse names the type in its message
    return parse


positive_int = _number(int, 1, what="a whole number of at least 1")
nonneg_int = _number(int, 0, what="a whole number of at least 0")
nonneg_float = _number(float, 0.0, what="a finite number of at least 0")
positive_float = _number(float, 1e-300, what="a finite number above 0")
# a time limit: at most ~31 years, well inside what a timer can wait (threading.TIMEOUT_MAX, ~292 years)
seconds = _number(float, 0.0, 1e9, what="a number of seconds from 0 to 1e9")
port = _number(int, 0, 65535, what="a port number 0..65535")
page_size = _number(int, 1, 500, what="a whole number 1..500")  # images per page of the review page
bits = _number(int, 0, 64, what="a number of bits 0..64")  # a distance between two 64-bit hashes
cosine = _number(float, -1.0, 1.0, what="a cosine similarity from -1 to 1")
