"""Load one module of an engine's tree by its file, with stand-ins for the imports it cannot make.

An engine's modules import its whole serving stack (schedulers, model registries, CUDA IPC,
torchvision backends) that is not installed here. The functions an adapter calls (the planners
`navit_resize_config`, `navit_resize`) are pure arithmetic in modules whose *other* imports are
infrastructure. `load_modules` runs the modules' own files, as shipped, with:

- every import of the engine's own package other than the file itself (`sglang.srt.environ`,
  `transformers.image_processing_backends`, ...) answered by a stand-in module, and
- every third-party import that the file itself makes and that is not installed here
  (`torchvision`, ...) answered likewise (an installed package's own optional imports, torch
  probing for `tqdm`, still fail as they would),

while installed packages (torch, numpy, PIL) import for real. A stand-in's attributes are inert
classes: they can be subclassed, called, subscripted and decorated with (their instances too, as
decorator factories: `@njit(parallel=True)`), and any use of their
value in arithmetic fails loudly. The names stood in are recorded in `module.__kimi_stand_ins__`.
The stand-ins live in `sys.modules` only while the file runs, so a second tree (or the real
package) loaded later sees none of them. `require` checks that a function the adapter calls is
there with the parameters it passes: otherwise one CandidateError line naming the file, the
function and the versions the adapter knows (exit 2), before anything runs.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import sys
import types
from pathlib import Path
from typing import Any, Sequence

from kimi_oracle.adapters.sources import Tree
from kimi_oracle.core.errors import CandidateError


class _StandMeta(type):
    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _stand_class(name)

    def __getitem__(cls, item: Any) -> Any:
        return cls


class _Stand(metaclass=_StandMeta):
    """An inert stand-in: a decorator returns what it decorates; a call returns a stand-in."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]  # used as a decorator (`@auto_docstring`)
        return super().__new__(cls)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __init_subclass__(cls, **kwargs: Any) -> None:  # `class K(ImagesKwargs, total=False)`
        pass

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _stand_class(name)()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # A decorator factory's decorator (`@njit(parallel=True)`) returns what it decorates; a
        # method of a stood-in object (`logger.warning(...)`) returns a stand-in.
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]
        return _stand_class(type(self).__name__)()


def _stand_class(name: str) -> type:
    return _StandMeta(name, (_Stand,), {"__module__": "kimi_oracle.adapters.stand_in"})


class _StandModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        value = _stand_class(name)
        setattr(self, name, value)
        return value


class _StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves `real` (dotted name -> file of the tree) as shipped; answers the other imports of
    `roots` (the engine's package) and missing packages the engine's files import with stand-ins."""

    def __init__(self, roots: Sequence[str], real: dict[str, Path]):
        self.roots = tuple(roots)
        self.real = real
        self.filenames = {str(path) for path in real.values()}
        self.stood_in: list[str] = []

    def _from_engine_file(self) -> bool:
        # The importer is one of the engine's files (not torch probing its own optional imports).
        frame = sys._getframe(2)
        while frame is not None and (frame.f_code.co_filename.startswith("<frozen") or frame.f_code.co_filename == __file__):
            frame = frame.f_back  # type: ignore[assignment]
        return frame is not None and frame.f_code.co_filename in self.filenames

    def _ours(self, fullname: str) -> bool:
        top = fullname.split(".")[0]
        if top in self.roots:
            return True
        if top == fullname and self._from_engine_file():  # stand in only when not installed
            others = [f for f in sys.meta_path if f is not self]
            return all(getattr(f, "find_spec", None) is None or f.find_spec(fullname, None) is None for f in others)
        return top in sys.modules and isinstance(sys.modules[top], _StandModule)

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname in self.real:
            file = self.real[fullname]
            return importlib.util.spec_from_file_location(
                fullname, file, submodule_search_locations=[str(file.parent)] if file.name == "__init__.py" else None)
        if not self._ours(fullname):
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: Any) -> Any:
        module = _StandModule(spec.name)
        module.__path__ = []
        self.stood_in.append(spec.name)
        return module

    def exec_module(self, module: Any) -> None:
        pass


def _dotted(tree: Tree, relative: str) -> str:
    parts = [tree.package, *relative[:-3].split("/")]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def load_modules(tree: Tree, relatives: Sequence[str]) -> list[Any]:
    """Run `tree`'s files `relatives` (paths inside its package) as its own modules, under their
    own names, stand-ins for the engine's other modules; nothing of the engine stays in
    `sys.modules` afterwards (a second tree loads beside it)."""
    real = {}
    for relative in relatives:
        path = tree.file(relative)
        if not path.is_file():
            raise CandidateError(f"engine {tree.engine} ({tree.version or 'unknown version'}, {tree.root}): "
                                 f"no file {tree.package}/{relative}")
        real[_dotted(tree, relative)] = path
    finder = _StandInFinder([tree.package], real)
    saved = {name: mod for name, mod in sys.modules.items() if name.split(".")[0] == tree.package}
    for name in saved:
        del sys.modules[name]
    sys.meta_path.insert(0, finder)
    try:
        modules = [importlib.import_module(name) for name in real]
    except Exception as exc:
        raise CandidateError(f"engine {tree.engine} {tree.version or ''}: loading {', '.join(relatives)} from "
                             f"{tree.root} failed: {type(exc).__name__}: {exc}") from None
    finally:
        sys.meta_path.remove(finder)
        for name in [n for n in sys.modules if n.split(".")[0] == tree.package
                     or isinstance(sys.modules[n], _StandModule)]:  # (a stood-in `torchvision` too)
            del sys.modules[name]
        sys.modules.update(saved)
    for module in modules:
        module.__kimi_stand_ins__ = tuple(finder.stood_in)
    return modules


def load_module(tree: Tree, relative: str) -> Any:
    """`load_modules` of one file."""
    return load_modules(tree, [relative])[0]


def require(module: Any, tree: Tree, relative: str, function: str, params: Sequence[str],
            known: Sequence[str]) -> Any:
    """`module.function` when it is a function taking `params`; else one CandidateError line."""
    func = getattr(module, function, None)
    where = f"{tree.file(relative)}"
    versions = f"the {tree.engine} adapter knows {', '.join(known)}; this tree is {tree.version or 'of unknown version'}"
    if not inspect.isfunction(func) or isinstance(func, type):
        raise CandidateError(f"{where}: no function {function}(); {versions}")
    missing = [p for p in params if p not in inspect.signature(func).parameters]
    if missing:
        raise CandidateError(f"{where}: {function}() takes no parameter {', '.join(missing)}; {versions}")
    return func


def require_class(module: Any, tree: Tree, relative: str, name: str, method: str, params: Sequence[str],
                  known: Sequence[str]) -> type:
    """`module.name` when it is a class whose `method` takes `params`; else one CandidateError line."""
    cls = getattr(module, name, None)
    where = f"{tree.file(relative)}"
    versions = f"the {tree.engine} adapter knows {', '.join(known)}; this tree is {tree.version or 'of unknown version'}"
    if not isinstance(cls, type):
        raise CandidateError(f"{where}: no class {name}; {versions}")
    func = getattr(cls, method, None)
    if not inspect.isfunction(func):
        raise CandidateError(f"{where}: {name} has no method {method}(); {versions}")
    missing = [p for p in params if p not in inspect.signature(func).parameters]
    if missing:
        raise CandidateError(f"{where}: {name}.{method}() takes no parameter {', '.join(missing)}; {versions}")
    return cls


__all__ = ["load_module", "load_modules", "require", "require_class"]
