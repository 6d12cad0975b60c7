"""The Paddle ecosystem packages the corpus builds its architectures from (test-only).

install() fetches each pinned wheel from the package registry with `pip download --no-deps`
(their own pins conflict with Paddle 3.3.1) and unpacks it under tests/.cache/ecosystem/ once;
nothing is installed into the virtualenv. enable() makes their top-level packages importable
WITHOUT running their package `__init__` files, which import training, data and download code
(and dependencies the corpus does not have): every package folder under those roots becomes an
empty module whose __path__ is the folder, so importing a leaf module runs only that module and
what it imports itself. Where a model needs a package's __init__ (a registry of classes), the
builder imports that package with run_init().
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import subprocess
import sys
import types
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

ROOT: Final = Path(__file__).resolve().parents[2]
CACHE: Final = ROOT / "tests" / ".cache" / "ecosystem"
WHEELS: Final = CACHE / "wheels"
SITE: Final = CACHE / "site"

# (pip requirement, wheel file name prefix)
PACKAGES: Final = (
    ("paddleclas==2.6.0", "paddleclas-2.6.0"),
    ("paddleseg==2.8.0", "paddleseg-2.8.0"),
    ("paddledet==2.6.0", "paddledet-2.6.0"),
    ("paddlenlp==2.8.1", "paddlenlp-2.8.1"),
    ("paddlespeech==1.5.0", "paddlespeech-1.5.0"),
    # PaddleOCR 2.10's own ppocr/modeling, which the official paddleocr 2.x wheels omit.
    ("unstructured-paddleocr==2.10.0", "unstructured_paddleocr-2.10.0"),
    # paddlenlp's logger formats with it at import time (a small pure-Python wheel).
    ("colorlog==6.12.0", "colorlog-6.12.0"),
)

# Importable top-level name -> its folder inside the unpacked wheels.
ROOTS: Final = {
    "ppcls": Path("paddleclas", "ppcls"),
    "paddleseg": Path("paddleseg"),
    "ppdet": Path("ppdet"),
    "paddlenlp": Path("paddlenlp"),
    "paddlespeech": Path("paddlespeech"),
    "ppocr": Path("unstructured_paddleocr", "ppocr"),
    "colorlog": Path("colorlog"),
}
# Plain dependencies among ROOTS: imported whole (their __init__ runs).
DEPENDENCIES: Final = frozenset({"colorlog"})


def versions() -> str:
    """The pinned requirements, one string (part of the export cache key)."""
    return ";".join(requirement for requirement, _ in PACKAGES)


def _wheel(prefix: str) -> Path | None:
    found = sorted(WHEELS.glob(f"{prefix}-*.whl"))
    return found[0] if found else None


def install() -> Path:
    """Downloads (once) and unpacks (once) every pinned wheel; returns the unpacked folder."""
    missing = [req for req, prefix in PACKAGES if _wheel(prefix) is None]
    if missing:
        WHEELS.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet"]
        subprocess.run([*command, "--dest", str(WHEELS), *missing], check=True)
    for _, prefix in PACKAGES:
        wheel = _wheel(prefix)
        assert wheel is not None, f"pip download left no wheel for {prefix}"
        marker = SITE / f".{prefix}.unpacked"
        if not marker.exists():
            with zipfile.ZipFile(wheel) as archive:
                archive.extractall(SITE)
            marker.write_text(hashlib.sha256(wheel.read_bytes()).hexdigest())
    return SITE


class _EmptyPackageLoader(importlib.abc.Loader):
    """A package module with a __path__ and nothing else: its __init__.py is not run on import.

    Only when code asks the package for a name it does not have (`from paddlenlp.layers import
    Linear`, a name its __init__ re-exports) and that is no submodule either, the __init__ runs
    then, once, in the package's namespace: most packages never need it, and those that do pay
    only for what their own __init__ imports."""

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        module.__getattr__ = _lazy_init(module)  # type: ignore[method-assign]


# How many times a package __init__ that failed half-way is run again when asked for a name.
_INIT_RUNS: Final = 8


def _lazy_init(module: types.ModuleType) -> Any:
    state = {"runs": 0, "running": False}

    def lookup(name: str) -> Any:
        if name.startswith("__") and name not in ("__version__", "__all__"):
            raise AttributeError(name)
        folder = Path(module.__path__[0])
        if (folder / f"{name}.py").exists() or (folder / name).is_dir():
            return importlib.import_module(f"{module.__name__}.{name}")
        init = folder / "__init__.py"
        if not state["running"] and state["runs"] < _INIT_RUNS and init.exists():
            state["runs"] += 1
            state["running"] = True
            module.__file__ = str(init)
            # What it defined before a failure (a stubbed dependency) is what the caller needs.
            # A failure can also be a circular import (bert's modeling imports model_utils,
            # which imports the package while model_utils is half-initialised): then a later
            # name asked for (ernie's PretrainedModel) runs it again, the cycle done.
            try:
                exec(compile(init.read_bytes(), str(init), "exec"), module.__dict__)
                state["runs"] = _INIT_RUNS
            except Exception:
                pass
            finally:
                state["running"] = False
        if name in module.__dict__:
            return module.__dict__[name]
        raise AttributeError(f"module {module.__name__!r} has no attribute {name!r}")

    return lookup


class _EcosystemFinder(importlib.abc.MetaPathFinder):
    """Finds modules under ROOTS in SITE; package folders load as empty packages."""

    def __init__(self, run_init: set[str]) -> None:
        self.run_init = run_init

    def runs_init(self, package: str) -> bool:
        prefixes = self.run_init | DEPENDENCIES
        return any(package == p or package.startswith(p + ".") for p in prefixes)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        top, *rest = fullname.split(".")
        if top not in ROOTS:
            return None
        if fullname in REPLACED:
            return importlib.machinery.ModuleSpec(fullname, _stubs, is_package=True)
        where = SITE / ROOTS[top] / Path(*rest)
        if where.is_dir():
            init = where / "__init__.py"
            if self.runs_init(fullname) and init.exists():
                return importlib.util.spec_from_file_location(
                    fullname, init, submodule_search_locations=[str(where)]
                )
            spec = importlib.machinery.ModuleSpec(fullname, _EmptyPackageLoader(), is_package=True)
            spec.submodule_search_locations = [str(where)]
            return spec
        source = where.with_suffix(".py")
        if source.exists():
            return importlib.util.spec_from_file_location(fullname, source)
        return None


class _Stub(types.ModuleType):
    """A module the architectures import but never use at inference (downloaders, loggers'
    optional backends): every attribute is a stub too, and calling one raises."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name not in ("__version__", "__all__"):
            raise AttributeError(name)
        return _Stub(f"{self.__name__}.{name}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.__name__ in PASSTHROUGH_DECORATORS and len(args) == 1 and callable(args[0]):
            return args[0]
        if any(self.__name__ == s or self.__name__.startswith(s + ".") for s in SILENT):
            return None
        raise RuntimeError(f"{self.__name__} is stubbed by tests/corpus/ecosystem.py")

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        return (object,)


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Last on sys.meta_path: third-party modules in STUBBED that are not installed."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname.split(".")[0] in STUBBED:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _Stub(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


# Dependencies of the packages' download, data and training helpers, imported at module level
# by architecture modules but never used to build or run a model: not installed, stubbed.
STUBBED: Final = frozenset(
    {"requests", "tqdm", "visualdl", "faiss", "ujson", "easydict", "prettytable",
     "cv2", "filelock", "jieba", "sentencepiece", "datasets", "huggingface_hub", "colorama",
     "seqeval", "multiprocess", "dill", "aistudio_sdk", "fastapi", "uvicorn", "typer",
     "paddlefsl", "tool_helpers", "onnx", "paddle2onnx", "yacs", "editdistance", "braceexpand",
     "jsonlines", "kaldiio", "librosa", "soundfile", "python_speech_features", "webrtcvad",
     "pypinyin", "g2p_en", "g2pM", "inflect", "jsonargparse", "matplotlib", "nara_wpe", "praatio",
     "resampy", "scipy", "textgrid", "timer", "tensorboardX", "zhon", "lmdb", "imgaug",
     "pyclipper", "shapely", "skimage", "rapidfuzz", "lxml", "premailer", "openpyxl",
     "attrdict", "fire", "fonttools", "Polygon", "pycocotools", "terminaltables", "motmetrics",
     "sklearn", "typeguard", "pydantic", "opencc", "hyperpyyaml", "paddleaudio", "yaml", "loguru", "paddlespeech_ctcdecoders"}
)  # fmt: skip

# Decorators of stubbed modules that architecture code applies at import: they return the
# function unchanged (paddlespeech checks argument types with typeguard at run time only).
PASSTHROUGH_DECORATORS: Final = frozenset({"typeguard.typechecked"})

# Stubbed modules whose calls do nothing: paddlespeech's logger configures loguru sinks (one a
# log file under ./exp) when its module is imported, and paddlespeech pip-installs its CTC
# decoders when they are missing (never: no installs, no network at import).
SILENT: Final = frozenset({"loguru", "paddlespeech.s2t.utils.dynamic_pip_install"})
# Modules of the ecosystem packages themselves replaced by (silent) stubs.
REPLACED: Final = frozenset({"paddlespeech.s2t.utils.dynamic_pip_install"})

_finder = _EcosystemFinder(set())
_stubs = _StubFinder()


def enable(run_init: Sequence[str] = ()) -> None:
    """Makes the ecosystem packages importable (installs them first); `run_init` names packages
    whose __init__.py files (theirs and their subpackages') must run (imported after this call)."""
    install()
    _finder.run_init.update(run_init)
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)
        sys.meta_path.append(_stubs)


def load(module: str) -> types.ModuleType:
    """Imports one module of an ecosystem package (its parent packages stay empty)."""
    enable()
    return importlib.import_module(module)
