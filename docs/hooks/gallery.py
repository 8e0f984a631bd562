"""MkDocs build hook: the gallery of ``examples/``, the concept pictures, the list of contributed manifolds.

At build time (``mkdocs build``/``serve``), this hook

1. runs every ``examples/NAME.py`` as ``python examples/NAME.py --out DIR --quick`` (with
   ``PYTHONPATH=src``), concurrently, and makes one gallery page per example: its module
   docstring, every PNG it wrote, its printed output and the command that reproduces it;
2. runs ``docs/hooks/concept_figures.py`` in the same way for the pictures of the concept
   pages (``figures/*.png``): nothing binary is committed, every picture comes from the code;
3. replaces the marker ``<!-- infogeo:contributed-manifolds -->`` in a page by the list of
   files in ``manifolds/``, each with its module docstring, so new files appear by themselves.

An example that fails, or writes no PNG, aborts the build.  Results are cached per process
and keyed on the scripts' contents, so ``mkdocs serve`` reruns only what changed.
"""
from __future__ import annotations

import ast
import concurrent.futures
import hashlib
import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

log = logging.getLogger("mkdocs.hooks.gallery")

GALLERY = "gallery"
FIGURES = "figures"
CONTRIB_MARKER = "<!-- infogeo:contributed-manifolds -->"
EXAMPLE_TIMEOUT_S = 900
OUTPUT_LINES = 40

_cache: Dict[str, "Run"] = {}


@dataclass
class Run:
    """One script run: where its figures are, what it printed, how long it took."""

    name: str
    script: Path
    out: Path
    quick: bool
    stdout: str = ""
    seconds: float = 0.0
    pngs: List[Path] = field(default_factory=list)


# ----------------------------------------------------------------------------- text helpers
def docstring_of(path: Path) -> str:
    """A script's module docstring, read without importing it."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    if not doc:
        raise PluginError(f"{path} has no module docstring; the gallery page is made from it")
    return doc


def _load_sibling(name: str):
    # mkdocs loads hooks by path, not as a package: import the docstring converter the same way
    spec = importlib.util.spec_from_file_location(f"infogeo_docs_{name}", Path(__file__).with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


_rst = _load_sibling("griffe_rst")
_titles = _load_sibling("plain_titles")


def rst_to_markdown(text: str) -> str:
    r"""A script's docstring as Markdown (``:math:`x``` -> ``\(x\)``; roles as plain code, no links)."""
    return _rst.convert(text, lambda target, short: f"`{target.rsplit('.', 1)[-1] if short else target}`")


def title_and_body(doc: str):
    """The docstring's first line as a plain-text title (math as Unicode: it goes to the nav), and the rest."""
    first, _, rest = doc.partition("\n")
    return _titles.tex_to_text(rst_to_markdown(first.strip().rstrip("."))), rst_to_markdown(rest.strip())


# ----------------------------------------------------------------------------- running scripts
def _root(config: MkDocsConfig) -> Path:
    return Path(config.config_file_path).resolve().parent


def _examples(root: Path) -> List[Path]:
    return sorted(p for p in (root / "examples").glob("*.py") if not p.name.startswith("_"))


def _takes_quick(script: Path) -> bool:
    # the examples' convention is ``--out DIR --quick``, defined in the script or through the
    # command-line helper it imports from another example; a script that never mentions it (read
    # from its source, without paying for an import) runs at its default size
    return "--quick" in script.read_text(encoding="utf-8")


def _run(run: Run, root: Path) -> Run:
    env = dict(os.environ, MPLBACKEND="Agg",
               PYTHONPATH=os.pathsep.join(filter(None, [str(root / "src"), os.environ.get("PYTHONPATH")])))
    cmd = [sys.executable, str(run.script), "--out", str(run.out)] + (["--quick"] if run.quick else [])
    shutil.rmtree(run.out, ignore_errors=True)  # figures of an earlier run of the script must not linger
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=EXAMPLE_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise PluginError(f"{run.script.name} ran longer than {EXAMPLE_TIMEOUT_S} s: {' '.join(cmd)}") from exc
    run.seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
        raise PluginError(f"{run.script.name} failed with exit code {proc.returncode}: {' '.join(cmd)}\n{tail}")
    run.stdout = proc.stdout
    run.pngs = sorted(run.out.rglob("*.png"))
    if not run.pngs:
        raise PluginError(f"{run.script.name} wrote no PNG figure into --out {run.out}; the gallery shows its figures")
    log.info("ran %s in %.1f s: %d figure(s)", run.script.name, run.seconds, len(run.pngs))
    return run


def _key(script: Path, quick: bool) -> str:
    return hashlib.sha256(script.read_bytes() + bytes([quick])).hexdigest()


def run_all(scripts: Dict[str, Path], root: Path, tmp: Path) -> Dict[str, Run]:
    """Run the scripts concurrently (one process each); reuse cached runs of unchanged scripts."""
    todo, done = [], {}
    for name, script in scripts.items():
        key = _key(script, _takes_quick(script))
        if key in _cache and all(p.is_file() for p in _cache[key].pngs):
            done[name] = _cache[key]
        else:
            todo.append((key, Run(name, script, tmp / name, _takes_quick(script))))
    workers = max(1, min(len(todo), os.cpu_count() or 1))
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        futures = {pool.submit(_run, run, root): key for key, run in todo}
        for fut in concurrent.futures.as_completed(futures):
            run = fut.result()  # re-raises a PluginError from the worker
            _cache[futures[fut]] = run
            done[run.name] = run
    return done


# ----------------------------------------------------------------------------- pages
def gallery_page(run: Run) -> str:
    title, body = title_and_body(docstring_of(run.script))
    figures = "\n\n".join(f"![{p.stem}]({run.name}/{p.relative_to(run.out).as_posix()})" for p in run.pngs)
    flag = " --quick" if run.quick else ""
    lines = run.stdout.rstrip().splitlines()
    shown = lines[-OUTPUT_LINES:]
    page = (f"# {title}\n\n{body}\n\n"
            f"## Figures\n\n{figures}\n\n"
            f"## Run it\n\n```bash\npython examples/{run.script.name} --out figures{flag}\n```\n\n"
            f"The figures above were made by this command when the site was built ({run.seconds:.0f} s).\n")
    if shown:
        which = f" (last {OUTPUT_LINES} lines)" if len(lines) > OUTPUT_LINES else ""
        block = "\n".join("    " + line for line in ["```text", *shown, "```"])
        page += f"\n??? note \"What it printed{which}\"\n\n{block}\n"
    return page


def gallery_index(runs: Dict[str, Run]) -> str:
    parts = ["# Gallery", "",
             "Every script in `examples/` is run when this site is built, with `--quick` (small sizes); "
             "each page shows the script's description and the figures it wrote. "
             "A script that fails stops the build, so what you see here is what the code does today.", ""]
    for name, run in runs.items():
        title, _ = title_and_body(docstring_of(run.script))
        first = run.pngs[0]
        parts += [f"## [{title}]({name}.md)", "",
                  f"[![{first.stem}]({name}/{first.relative_to(run.out).as_posix()}){{ width=\"480\" }}]({name}.md)",
                  "", f"`examples/{run.script.name}` — {len(run.pngs)} figure(s).", ""]
    return "\n".join(parts)


def contributed_list(root: Path) -> str:
    """Markdown list of ``manifolds/*.py``: name, loader call and module docstring."""
    parts = []
    for path in sorted((root / "manifolds").glob("*.py")):
        if path.name.startswith("_"):
            continue
        title, body = title_and_body(docstring_of(path))
        parts += [f"### `{path.stem}`", "", f"{title}.", "", body, "",
                  f"```python\nM = ig.load_manifold(\"{path.stem}\")\n```", ""]
    if not parts:
        raise PluginError(f"no contributed manifolds found in {root / 'manifolds'}")
    return "\n".join(parts)


# ----------------------------------------------------------------------------- mkdocs events
_state: Dict[str, object] = {}


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    """Add one gallery page per example to the ``Gallery`` section of the nav."""
    root = _root(config)
    examples = _examples(root)
    if not examples:
        raise PluginError(f"no examples found in {root / 'examples'}")
    for item in config.nav or []:
        if isinstance(item, dict) and "Gallery" in item:
            entries = item["Gallery"]
            entries += [{title_and_body(docstring_of(p))[0]: f"{GALLERY}/{p.stem}.md"} for p in examples]
            break
    else:
        raise PluginError("mkdocs.yml's nav needs a 'Gallery' section for the examples")
    return config


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Run the examples and the concept-figure script; add their pages and PNGs to the site."""
    root = _root(config)
    if "tmp" not in _state:
        _state["tmp"] = tempfile.TemporaryDirectory(prefix="infogeo-docs-")
    tmp = Path(_state["tmp"].name)  # type: ignore[attr-defined]
    scripts = {p.stem: p for p in _examples(root)}
    concept = Path(__file__).with_name("concept_figures.py")
    runs = run_all({**scripts, "_concepts": concept}, root, tmp)

    def add_file(src_uri: str, **kw) -> None:
        if files.get_file_from_path(src_uri) is not None:
            raise PluginError(f"{src_uri} is generated by the gallery hook; remove it from docs/")
        files.append(File.generated(config, src_uri, **kw))

    for png in runs["_concepts"].pngs:
        add_file(f"{FIGURES}/{png.relative_to(runs['_concepts'].out).as_posix()}", abs_src_path=str(png))
    examples = {name: runs[name] for name in scripts}
    for name, run in examples.items():
        add_file(f"{GALLERY}/{name}.md", content=gallery_page(run))
        for png in run.pngs:
            add_file(f"{GALLERY}/{name}/{png.relative_to(run.out).as_posix()}", abs_src_path=str(png))
    add_file(f"{GALLERY}/index.md", content=gallery_index(examples))
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> Optional[str]:
    if CONTRIB_MARKER in markdown:
        return markdown.replace(CONTRIB_MARKER, contributed_list(_root(config)))
    return markdown


def on_shutdown() -> None:
    tmp = _state.pop("tmp", None)
    if tmp is not None:
        tmp.cleanup()  # type: ignore[attr-defined]
