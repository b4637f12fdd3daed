"""Fingerprints of source code: what decides that a stored result is stale.

A cached verdict is only as good as the code that produced it, so both
fingerprints here hash source files — their bytes, named by module, never by
absolute path, so one checkout gives the same fingerprint in every process
and on every machine:

* a variant family's (:func:`module_fingerprint`): the whole module that
  defines its builder, plus every module of the same package directory that
  it imports, transitively — a wrapper's constants, a shared helper module, a
  kernel module imported inside the builder. Imports are found by parsing the
  source with :mod:`ast`, never by importing it: kernel modules import triton,
  which may be missing.
* the measurement core's code (:func:`measurement_fingerprint`): every module
  of ``measure/``, part of the timing policy's fingerprint: a store written by
  an older harness, whose validation or timing differed, is measured again.

What a parse cannot see — a module imported by a computed name, a helper
outside the package directory, a builder that names another module as its own —
is caught by what ran (:func:`loaded_sources`): each result records the source
hash of every source file its worker had loaded as a module from outside the
standard library, the installed packages and matprobe's own code, and a stored
result whose files changed since is measured again and never exported (a file read by
path and never imported a family still names in ``variant_family(sources=...)``).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import sys
import sysconfig
from collections.abc import Iterator, Mapping
from pathlib import Path

#: The measurement core: this package's folder. Every module file in it is the
#: code that decides a verdict or a time (with the numeric constants it defines,
#: which live in its text) — ``sampling`` the device clock, ``bench`` the input sets
#: it rotates over, ``draws`` the inputs' values, ``validate`` the tolerances, and
#: so on — so the folder itself is what the policy fingerprint hashes: a module
#: added to ``measure/`` counts without being listed anywhere.
MEASURE_DIR = Path(__file__).resolve().parent
_MEASURE_PACKAGE = __name__.rpartition(".")[0]


def hash_files(files: Mapping[str, Path]) -> str:
    """SHA-256 over the files' bytes, in order of their module names.

    A file that cannot be read is hashed as such: the fingerprint then differs
    from a readable checkout's, and the affected pairs are measured again.
    """
    digest = hashlib.sha256()
    for name in sorted(files):
        try:
            data = files[name].read_bytes()
        except OSError:
            data = b"\0unreadable"
        digest.update(f"{name}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


def _with_parents(name: str) -> Iterator[str]:
    """``a.b.c``, ``a.b``, ``a``: importing a module runs its packages too."""
    while name:
        yield name
        name = name.rpartition(".")[0]


# Keyed by the text itself, so never stale: the shared helper modules are parsed
# once per process, not once per family.
@functools.lru_cache(maxsize=256)
def imported_names(source: bytes, module: str, is_package: bool) -> frozenset[str]:
    """Absolute names of the modules ``source`` may import, anywhere in it
    (inside functions and ``TYPE_CHECKING`` blocks too); relative imports are
    resolved against ``module``. A ``from p import n`` gives ``p`` and ``p.n``
    (``n`` may be a submodule). Unparsable source imports nothing known."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):  # ValueError: null bytes
        return frozenset()
    here = module if is_package else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.update(_with_parents(alias.name))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = here.split(".") if here else []
                if node.level - 1 > len(parts):
                    continue  # beyond the top-level package: fails at import anyway
                kept = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*kept, base] if base else kept)
            if base:
                found.update(_with_parents(base))
            for alias in node.names:
                if alias.name != "*":
                    found.add(f"{base}.{alias.name}" if base else alias.name)
    return frozenset(found)


def _resolve(name: str, package: str, root: Path) -> Path | None:
    """The file of module ``name`` when it lies under ``root`` (package ``package``)."""
    if package and name == package:
        rel: list[str] = []
    elif package and name.startswith(package + "."):
        rel = name[len(package) + 1 :].split(".")
    elif not package:
        rel = name.split(".")
    else:
        return None
    init = root.joinpath(*rel, "__init__.py")
    if init.is_file():  # a package directory wins over a module file, as in Python
        return init
    if rel:
        module = root.joinpath(*rel[:-1], rel[-1] + ".py")
        if module.is_file():
            return module
    return None


def module_closure(module: str, path: Path) -> dict[str, Path]:
    """``module`` (at ``path``) and, transitively, every module it imports that
    lives in its package directory (subpackages included), by module name."""
    is_package = path.name == "__init__.py"
    package = module if is_package else module.rpartition(".")[0]
    root = path.parent
    files = {module: path}
    todo = [module]
    while todo:
        name = todo.pop()
        file = files[name]
        try:
            source = file.read_bytes()
        except OSError:
            continue  # hash_files marks it unreadable
        for imported in imported_names(source, name, file.name == "__init__.py"):
            if imported in files:
                continue
            found = _resolve(imported, package, root)
            if found is not None:
                files[imported] = found
                todo.append(imported)
    return files


def module_fingerprint(module: str, path: Path | None = None) -> str:
    """The hash of :func:`module_closure`; ``path`` defaults to the imported
    module's file. Empty when the module has no source file (``-c`` code, a REPL)."""
    if path is None:
        loaded = sys.modules.get(module)
        file = getattr(loaded, "__file__", None)
        if not isinstance(file, str):
            return ""
        path = Path(file)
    if not path.is_file():
        return ""
    return hash_files(module_closure(module, path))


def measurement_sources(directory: Path | None = None) -> dict[str, Path]:
    """Every module file of the measurement core's folder (:data:`MEASURE_DIR`,
    or ``directory`` in its place), by module name (the package's own
    ``__init__.py`` as the package)."""
    where = MEASURE_DIR if directory is None else directory
    return {
        _MEASURE_PACKAGE if file.stem == "__init__" else f"{_MEASURE_PACKAGE}.{file.stem}": file
        for file in sorted(where.glob("*.py"))
        if file.is_file()
    }


@functools.cache
def measurement_fingerprint() -> str:
    """The hash of the measurement core's code, once per process: the code
    that runs is what was imported, and planning asks for it once per pair."""
    return hash_files(measurement_sources())


@functools.cache
def _installed_roots() -> tuple[Path, ...]:
    """The standard library's and the installed packages' folders: code there is
    named by its distribution's version in the device fingerprint, not hashed."""
    paths = sysconfig.get_paths()
    roots = {paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths}
    roots.update(p for p in sys.path if "site-packages" in p or "dist-packages" in p)
    return tuple(Path(root).resolve() for root in roots if root)


#: matprobe's own code: its measurement code is in the policy fingerprint, its
#: families' closures in their own fingerprints
_OWN_ROOT = MEASURE_DIR.parent


def loaded_sources() -> dict[str, str]:
    """Every source file this process has loaded as a module from outside the
    standard library, the installed packages and matprobe itself — a plugin, the
    modules it imported by any name, a test's kernels, a script — by path: the hash
    of its bytes (16 hex), taken the first time this process looks (right after the
    first pair it measured: the code that ran); and every installed distribution
    it imported from, as ``dist:NAME``: its version. What ran, not what a family
    says about itself."""
    found: dict[str, str] = {}
    for name, module in list(sys.modules.items()):
        path = _outside_path(name, getattr(module, "__file__", None))
        if path is not None:
            if path not in _digests:
                _digests[path] = _file_digest(path)
            found[path] = _digests[path]
    for dist in _loaded_distributions():
        if dist not in _versions:  # what was imported: read once a process
            _versions[dist] = _version(dist)
        found[DIST_PREFIX + dist] = _versions[dist]
    return found


#: Keys of :func:`loaded_sources` that name an installed distribution (its version)
#: rather than a file (its hash).
DIST_PREFIX = "dist:"


def changed_sources(recorded: dict[str, str]) -> list[str]:
    """The files of ``recorded`` (:func:`loaded_sources` when a result was measured)
    whose bytes now differ or that are gone, and the distributions installed now at
    another version (or not at all)."""
    changed = []
    for key, value in sorted(recorded.items()):
        if key.startswith(DIST_PREFIX):
            if _version(key[len(DIST_PREFIX) :]) != value:
                changed.append(key)
        elif _file_digest(key) != value:
            changed.append(key)
    return changed


def _loaded_distributions() -> list[str]:
    """The installed distributions (not the standard library) of the top-level
    packages this process has imported, by name."""
    import importlib.metadata

    global _dists_of
    if _dists_of is None:
        _dists_of = importlib.metadata.packages_distributions()
    top = {name.partition(".")[0] for name in list(sys.modules)}
    return sorted({dist for name in top for dist in _dists_of.get(name, ())})


#: top-level import name → its distributions (read once a process)
_dists_of: Mapping[str, list[str]] | None = None
#: by distribution: the version this process imported
_versions: dict[str, str] = {}


def _version(dist: str) -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


#: by (module name, file): its resolved path when it counts (see loaded_sources), else None
_classified: dict[tuple[str, str], str | None] = {}
#: by path: the digest first taken in this process
_digests: dict[str, str] = {}


def _outside_path(name: str, file: object) -> str | None:
    if not isinstance(file, str) or not file.endswith(".py") or not Path(file).is_absolute():
        return None  # not a file a module was loaded from (torch.ops says "_ops.py")
    key = (name, file)
    if key not in _classified:
        path = Path(file).resolve()
        inside = path.is_relative_to(_OWN_ROOT) or any(
            path.is_relative_to(root) for root in _installed_roots()
        )
        _classified[key] = None if inside else str(path)
    return _classified[key]


def _file_digest(path: str) -> str:
    try:
        data = Path(path).read_bytes()
    except OSError:
        data = b"\0unreadable"
    return hashlib.sha256(data).hexdigest()[:16]
