"""Registries of every extension point: builders, prompt strategies, evaluation protocols, reports, tiny
and random models, image-quality metrics. Entries register themselves where they are defined, with a decorator (the way timm's
``@register_model`` does), e.g.::

    @BUILDERS.register("imagenet-d")
    class ImageNetDBuilder(Builder): ...

A registry imports the modules that define its entries the first time it is asked for one (``packages``:
every module of those packages), so ``gensets --help`` stays fast and a new entry is one new file with one
decorator; an entry registered anywhere else (a plugin, a test file) is found as soon as its module is
imported. An entry may also be declared as a ``"module:attr"`` target (``REG.register("toy", "pkg.toy:Toy")``),
imported only when it is first asked for: a package declares its entries beside itself (its ``__init__``) and
registries built with ``walk=False`` import only that ``__init__`` (model families, storage schemes, papers).
``also``: the modules a function names, asked again each time (every registered paper's
:attr:`~gensets.papers.base.Paper.modules`): :data:`PAPERS` holds the papers as targets (gensets/papers/__init__.py
lists gensets' own; a plugin's module registers its own), and the builders, reports,
prompt strategies, dataset identifiers, released datasets and label spaces of each are found through it.

Installed packages extend every registry through the entry-point group :data:`PLUGIN_GROUP`
(``[project.entry-points."gensets.plugins"] name = "pkg.module"`` or ``"pkg.module:register"``): the CLI and
every Ray worker call :func:`load_plugins` once as they start; a plugin's module registers what it brings when
imported (a callable target is then called with no argument).
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from collections.abc import Callable, Iterator
from typing import Any

from gensets.errors import GensetsError
from gensets.notices import warn

PLUGIN_GROUP = "gensets.plugins"


class Target(str):
    """A ``"module:attr"`` entry not imported yet (:meth:`Registry.register` with a string)."""

    def load(self) -> Any:
        module, _, attr = self.partition(":")
        obj = importlib.import_module(module)
        for part in filter(None, attr.split(".")):
            obj = getattr(obj, part)
        return obj


class Registry:
    def __init__(self, kind: str, *packages: str, walk: bool = True, also: Callable[[], list[str]] | None = None):
        self.kind = kind
        self._packages = packages
        self._walk = walk  # False: import only each package's __init__ (which declares "module:attr" targets)
        self._also = also
        self._entries: dict[str, Any] = {}
        self._owners: dict[str, str] = {}  # name -> who registered it: "plugin 'x' (pkg.mod)" or the module
        self._discovered = not packages

    def register(self, name: str, obj: Any = None) -> Callable[[Any], Any] | Any:
        """``@REG.register("name")`` above a class or function, ``REG.register("name", obj)``, or
        ``REG.register("name", "module:attr")``: a target imported when it is first asked for."""

        def add(o: Any) -> Any:
            old = self._entries.get(name)
            if old is not None and old is not o and not (isinstance(old, Target) and _loads_as(old, o)):
                if not self._plugin_refused(name, old, o):
                    return o  # a plugin's registration of a name gensets' own entry holds: refused, said once
            if isinstance(o, type) and not vars(o).get("name"):
                o.name = name  # a registered class knows its name, a subclass of one too (builders, protocols, strategies, reports)
            self._entries[name] = o
            self._owners[name] = _LOADING or _module(o)
            return o

        if isinstance(obj, str):
            if ":" not in obj:
                raise ValueError(f"{self.kind} '{name}': a target is 'module:attr', not {obj!r}")
            old = self._entries.get(name)
            if old is not None and old != obj and not self._plugin_refused(name, old, Target(obj)):
                return obj
            if old is None or old != obj:
                self._entries[name] = Target(obj)
                self._owners[name] = _LOADING or _module(Target(obj))
            return obj
        return add if obj is None else add(obj)

    def _plugin_refused(self, name: str, old: Any, new: Any) -> bool:
        """A second registration of ``name``: whether ``new`` takes it. gensets' own entry (a module of gensets)
        keeps its name against a plugin's (or any other package's), whichever registered first: a paper's entries
        register as its modules are first imported, which may be after the plugins loaded. The plugin's
        registration is refused with one warning naming both; two entries of gensets, or of two plugins: KeyError."""
        new_owner = _LOADING or _module(new)
        old_owner = self._owners.get(name) or _module(old)
        if _builtin(new_owner) == _builtin(old_owner):
            raise KeyError(f"{self.kind} '{name}' is registered twice ({old_owner} and {new_owner})")
        plugin, own = (new_owner, _module(old)) if _builtin(old_owner) else (old_owner, _module(new))
        warn(f"warning: {plugin} registers {self.kind} '{name}', a name gensets' own {self.kind} ({own}) "
             f"declares: the plugin's registration is refused, gensets' own is used")
        return _builtin(new_owner)

    def _resolve(self, name: str) -> Any:
        entry = self._entries[name]
        if isinstance(entry, Target):
            obj = entry.load()  # its module may register it itself, with the decorator, as it is imported
            if isinstance(self._entries.get(name), Target):  # its module did not register it as it was imported
                if isinstance(obj, type) and not vars(obj).get("name"):
                    obj.name = name
                self._entries[name] = obj
            entry = self._entries[name]
        return entry

    def unregister(self, name: str) -> None:
        self._entries.pop(name, None)
        self._owners.pop(name, None)

    def _discover(self) -> None:
        if not self._discovered:
            self._discovered = True
            for package in self._packages:
                mod = importlib.import_module(package)
                if not self._walk:
                    continue
                for info in pkgutil.walk_packages(getattr(mod, "__path__", ()), prefix=f"{package}."):
                    importlib.import_module(info.name)
        for module in self._also() if self._also else ():  # asked each time: a paper registered since
            if module not in sys.modules:
                importlib.import_module(module)

    def get(self, name: str) -> Any:
        self._discover()
        try:
            return self._resolve(name)
        except KeyError:
            raise KeyError(f"unknown {self.kind} '{name}' (known: {', '.join(self)})") from None

    def names(self) -> list[str]:
        """Every registered name, in registration order (for strategies: the paper's table order)."""
        self._discover()
        return list(self._entries)

    def items(self) -> list[tuple[str, Any]]:
        self._discover()
        return [(name, self._resolve(name)) for name in list(self._entries)]

    def __contains__(self, name: str) -> bool:
        self._discover()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self.names()))


def _module(obj: Any) -> str:
    """The module an entry comes from (a target's module, or the object's)."""
    if isinstance(obj, Target):
        return obj.partition(":")[0]
    return getattr(obj, "__module__", None) or type(obj).__module__


def _builtin(owner: str) -> bool:
    return owner == "gensets" or owner.startswith("gensets.")


def _loads_as(target: Target, obj: Any) -> bool:
    module, _, attr = target.partition(":")
    return getattr(obj, "__module__", None) == module and getattr(obj, "__qualname__", None) == attr


_PLUGINS: dict[str, str] = {}  # entry point name -> its target, once loaded in this process
_LOADING: str | None = None  # "plugin 'name' (target)" while load_plugins imports it: whose registrations these are


def load_plugins() -> list[str]:
    """Import every installed plugin (the entry points of :data:`PLUGIN_GROUP`) once per process; a target that
    is a callable is called. The names loaded. A plugin that fails to load: GensetsError, one line naming it."""
    from importlib.metadata import entry_points

    global _LOADING
    for ep in sorted(entry_points(group=PLUGIN_GROUP), key=lambda e: e.name):
        if ep.name in _PLUGINS:
            continue
        _PLUGINS[ep.name] = ep.value
        _LOADING = f"plugin {ep.name!r} ({ep.value})"
        try:
            obj = ep.load()
            if callable(obj) and not isinstance(obj, type):
                obj()
        except Exception as e:  # noqa: BLE001 - a broken plugin: one line naming it, never a traceback
            raise GensetsError(f"plugin {ep.name!r} ({ep.value}, entry point group {PLUGIN_GROUP}) cannot be "
                               f"loaded: {type(e).__name__}: {' '.join(str(e).split())[:300]}") from None
        finally:
            _LOADING = None
    return sorted(_PLUGINS)


# the papers (gensets.papers.base.Paper): gensets/papers/__init__.py registers each as a "module:attr" target
PAPERS = Registry("paper", "gensets.papers", walk=False)


def paper_modules() -> list[str]:
    """The modules every registered paper names (its builders, reports, prompt strategies)."""
    return [m for _, paper in PAPERS.items() for m in paper.modules]


BUILDERS = Registry("builder", "gensets.builders", also=paper_modules)
STRATEGIES = Registry("prompt strategy", also=paper_modules)
PROTOCOLS = Registry("protocol", "gensets.evaluation.protocols")
REPORTS = Registry("report", "gensets.evaluation.reports", also=paper_modules)
# split -> the builder whose dataset it is (or None), for a split whose samples name none (the evaluation runner)
IDENTIFIERS = Registry("dataset identifier", also=paper_modules)
# a dataset as its authors release it, read by what it is (gensets.evaluation.data.open_source): each entry
# answers looks(folder) -> bool, read_folder(folder, config, split) -> Source, matches_id(dataset) -> bool (a Hub
# id it is published under) and read_hub(dataset, config, split) -> Source
RELEASED_DATASETS = Registry("released dataset", also=paper_modules)
# builder name -> its label space's paper-specific facts (gensets.evaluation.protocols.base.LabelSpace): the
# class map of its classes to ImageNet ids, its zero-shot names and template when following the paper
LABEL_SPACES = Registry("label space", also=paper_modules)
TINY_MODELS = Registry("tiny model", "gensets.models.tiny")
RANDOM_MODELS = Registry("random model", "gensets.models.random")
QUALITY_METRICS = Registry("quality metric", "gensets.quality")
FAMILIES = Registry("model family", "gensets.models.families", walk=False)  # spec kinds: timm:, hf:, tiny:, ...
STORES = Registry("storage scheme", "gensets.stores", walk=False)  # workspace URL schemes: s3://, gs://, ...
