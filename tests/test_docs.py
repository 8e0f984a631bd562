"""The documentation site: a strict, warning-free build with the gallery, the figures and the API reference.

One test builds the site (that runs every example with ``--quick``, so it is the slow one);
the others check the build hook and the docstring converter on small inputs, and run the
Python snippets of the pages so that the prose stays true to the code.
"""
import importlib.util
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
EXAMPLES = sorted(p.stem for p in (ROOT / "examples").glob("*.py") if not p.name.startswith("_"))

pytest.importorskip("mkdocs")
pytest.importorskip("material")
pytest.importorskip("mkdocstrings_handlers.python")


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.images, self.ids = [], set()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "img" and a.get("src"):
            self.images.append(a["src"])
        if a.get("id"):
            self.ids.add(a["id"])


def _parse(html_file: Path) -> _Links:
    p = _Links()
    p.feed(html_file.read_text(encoding="utf-8"))
    return p


class _Assets(HTMLParser):
    """What a page loads (scripts, stylesheets, fonts, images, frames) and the text of its titles and nav."""

    LOADS = {"script": "src", "img": "src", "iframe": "src", "source": "src", "audio": "src", "video": "src",
             "embed": "src", "object": "data", "link": "href"}

    def __init__(self):
        super().__init__()
        self.loads, self.titles, self._nav, self._title = [], [], 0, False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in self.LOADS and a.get(self.LOADS[tag]):
            rel = a.get("rel") or ""
            if tag != "link" or not ({"canonical", "alternate", "next", "prev"} & set(rel.split())):
                self.loads.append(a[self.LOADS[tag]])
        self._nav += tag == "nav"
        self._title |= tag == "title"

    def handle_endtag(self, tag):
        self._nav -= tag == "nav" and self._nav > 0
        self._title &= tag != "title"

    def handle_data(self, data):
        if (self._nav or self._title) and data.strip():
            self.titles.append(data.strip())


_EXTERNAL = re.compile(r"^(?:[a-z][a-z0-9+.-]*:)?//", re.I)
_RAW_TEX = re.compile(r"\\[()\[\]]|\\[A-Za-z]+|\$[^$]+\$")


def site_problems(site: Path):
    """External assets loaded by any page or stylesheet, and raw TeX in any title or nav entry."""
    problems = []
    for page in sorted(site.rglob("*.html")):
        p = _Assets()
        p.feed(page.read_text(encoding="utf-8"))
        rel = page.relative_to(site)
        problems += [f"{rel} loads {src}" for src in p.loads if _EXTERNAL.match(src)]
        problems += [f"{rel}: raw TeX in a title or nav entry: {t!r}" for t in p.titles if _RAW_TEX.search(t)]
    for css in sorted(site.rglob("*.css")):
        for url in re.findall(r"(?:url\(|@import)\s*['\"]?((?:https?:)?//[^'\")\s]+)", css.read_text(encoding="utf-8")):
            problems.append(f"{css.relative_to(site)} loads {url}")
    return problems


def _local_images(page: Path):
    """Files behind the page's <img> tags (remote images excluded)."""
    out = []
    for src in _parse(page).images:
        if not re.match(r"[a-z]+:", src):
            out.append((page.parent / src.split("#")[0]).resolve())
    return out


def test_site_builds_strict_without_warnings(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    pytest.importorskip("matplotlib")
    site = tmp_path / "site"
    # NO_MKDOCS_2_WARNING: recent mkdocs-material prints an end-of-life notice (print() to stderr,
    # not a logged build warning, so --strict ignores it); the notice names this variable to silence it
    env = dict(os.environ, MPLBACKEND="Agg", NO_MKDOCS_2_WARNING="1")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-5000:]
    warnings = [line for line in log.splitlines() if "WARNING" in line]
    assert not warnings, "\n".join(warnings)

    # offline: no page loads a script, stylesheet, font or image from elsewhere; MathJax is served by the site;
    # no title, nav or table-of-contents entry shows raw TeX
    assert not site_problems(site), "\n".join(site_problems(site)[:40])
    assert (site / "assets" / "mathjax" / "tex-svg.js").is_file()
    assert 'src="../assets/mathjax/tex-svg.js"' in (site / "concepts" / "index.html").read_text(encoding="utf-8")

    # interactive examples of docstrings are code blocks, without doctest directives
    nn_api = (site / "reference" / "nn" / "index.html").read_text(encoding="utf-8")
    assert "doctest:" not in nn_api and "<blockquote>" not in nn_api
    assert re.search(r'<code>.*?ParameterSpace', nn_api, re.S)

    # the gallery: an index and one page per example, every image on them present in the site
    index = site / "gallery" / "index.html"
    assert index.is_file()
    for name in EXAMPLES:
        page = site / "gallery" / name / "index.html"
        assert page.is_file(), f"no gallery page for examples/{name}.py"
        images = _local_images(page)
        pngs = sorted((site / "gallery" / name).glob("*.png"))
        assert pngs, f"examples/{name}.py left no PNG in the site"
        assert {p.resolve() for p in pngs} <= set(images), "a figure of the example is not shown on its page"
        for img in images:
            assert img.is_file() and img.stat().st_size > 10_000, f"{img} missing or empty on gallery/{name}"
        assert f"python examples/{name}.py --out" in page.read_text(encoding="utf-8")  # the "run it" line
        assert name in index.read_text(encoding="utf-8")

    # the concept pictures are generated and shown
    concept_imgs = _local_images(site / "concepts" / "index.html")
    assert len(concept_imgs) >= 4 and all(p.is_file() and p.stat().st_size > 10_000 for p in concept_imgs)

    # the API reference: known objects have anchors, docstring math became arithmatex, no raw RST roles left
    expect = {
        "geometry": ["infogeo.geometry.metric.Metric.sharp", "infogeo.geometry.metric.Metric.flat",
                     "infogeo.geometry.pullback.PullbackMetric", "infogeo.geometry.vectors.Covector"],
        "statistical": ["infogeo.statistical.exponential_family.ExponentialFamily",
                        "infogeo.statistical.gaussian.Gaussian"],
        "solvers": ["infogeo.solvers.gradient_descent.GradientDescent", "infogeo.solvers.result.OptimizeResult"],
        "nn": ["infogeo.nn.optim.natural_gradient.NaturalGradient", "infogeo.nn.space.ParameterSpace"],
        "viz": ["infogeo.viz.kl_ball.plot_kl_ball"],
        "contrib": ["infogeo.contrib.load_manifold"],
    }
    for page, ids in expect.items():
        html = site / "reference" / page / "index.html"
        found = _parse(html).ids
        missing = [i for i in ids if i not in found]
        assert not missing, f"reference/{page}: no anchor for {missing}"
    for html in (site / "reference").rglob("index.html"):
        text = html.read_text(encoding="utf-8")
        assert not re.search(r":(math|class|func|meth|mod):`", text), f"raw RST role left in {html}"
    assert "arithmatex" in (site / "reference" / "statistical" / "index.html").read_text(encoding="utf-8")

    # the contributed families page lists every file of manifolds/
    headings = _parse(site / "manifolds" / "contributed" / "index.html").ids
    for f in (ROOT / "manifolds").glob("*.py"):
        if not f.name.startswith("_"):
            assert f.stem in headings, f"manifolds/{f.name} is not on the contributed families page"


def test_site_check_finds_external_assets_and_raw_tex(tmp_path):
    (tmp_path / "a.html").write_text(
        '<html><head><title>KL \\(\\mu\\)</title><script src="https://cdn.example/x.js"></script>'
        '<link rel="stylesheet" href="//fonts.example/css"><link rel="canonical" href="https://site/a/">'
        '<script src="assets/local.js"></script></head><body><nav><a href="#x">Charts \\(\\theta\\)</a>'
        '<a href="https://elsewhere/">a link is fine</a></nav><p>body math \\(x\\) is fine</p></body></html>')
    (tmp_path / "s.css").write_text("@font-face { src: url(https://fonts.example/f.woff2) }")
    found = site_problems(tmp_path)
    assert len(found) == 5, found
    assert any("cdn.example" in f for f in found) and any("fonts.example/css" in f for f in found)
    assert any("f.woff2" in f for f in found) and sum("raw TeX" in f for f in found) == 2


def test_plain_titles_turn_math_into_unicode():
    titles = _load("infogeo_docs_plain_titles", DOCS / "hooks" / "plain_titles.py")
    assert titles.tex_to_text(r"Flows in \(\mu\) and :math:`\theta`") == "Flows in μ and θ"
    assert titles.tex_to_text(r"\(\mathrm{KL}(p\|q) = \varepsilon\), \(\sigma^2\), \(x_1\)") == "KL(p‖q) = ε, σ², x₁"


def test_doctest_examples_become_code_blocks():
    pytest.importorskip("griffe")
    ext = _load("infogeo_docs_griffe_rst", DOCS / "hooks" / "griffe_rst.py")
    out = ext.convert("Intro.\n>>> a = f(1,   # doctest: +SKIP\n...       2)\n3\n\nafter", lambda t, s: t)
    assert out == "Intro.\n\n```pycon\n>>> a = f(1,\n...       2)\n3\n```\n\nafter"


# ----------------------------------------------------------------------------- the hook, on small inputs
@pytest.fixture(scope="module")
def hook():
    return _load("infogeo_docs_gallery_hook", DOCS / "hooks" / "gallery.py")


def test_a_failing_example_fails_the_build(hook, tmp_path):
    from mkdocs.exceptions import PluginError
    bad = tmp_path / "bad.py"
    bad.write_text('"""Fails."""\nraise SystemExit("boom")\n')
    with pytest.raises(PluginError, match="bad.py failed with exit code 1"):
        hook._run(hook.Run("bad", bad, tmp_path / "out", quick=False), ROOT)
    silent = tmp_path / "silent.py"
    silent.write_text('"""Draws nothing."""\n')
    with pytest.raises(PluginError, match="wrote no PNG"):
        hook._run(hook.Run("silent", silent, tmp_path / "out2", quick=False), ROOT)


def test_gallery_page_shows_docstring_figures_and_command(hook, tmp_path):
    script = tmp_path / "demo_plot.py"
    script.write_text('"""A title line.\n\nBody with ``code`` and :math:`x^2`.\n"""\n')
    run = hook.Run("demo_plot", script, tmp_path / "out", quick=True, stdout="a\nb\n", seconds=1.0)
    (tmp_path / "out").mkdir()
    run.pngs = [tmp_path / "out" / "fig1.png"]
    page = hook.gallery_page(run)
    assert page.startswith("# A title line\n")
    assert r"Body with `code` and \(x^2\)." in page
    assert "![fig1](demo_plot/fig1.png)" in page
    assert "python examples/demo_plot.py --out figures --quick" in page


def test_quick_is_passed_only_to_scripts_that_define_it(hook, tmp_path):
    with_flag, without = tmp_path / "a.py", tmp_path / "b.py"
    with_flag.write_text("ap.add_argument('--quick', action='store_true')\n")
    without.write_text("ap.add_argument('--full', action='store_true')\n")
    assert hook._takes_quick(with_flag) and not hook._takes_quick(without)


def test_contributed_list_covers_every_file(hook):
    text = hook.contributed_list(ROOT)
    for f in (ROOT / "manifolds").glob("*.py"):
        if not f.name.startswith("_"):
            assert f'ig.load_manifold("{f.stem}")' in text
    assert ":math:`" not in text


def test_rst_roles_become_markdown():
    griffe = pytest.importorskip("griffe")
    ext = _load("infogeo_docs_griffe_rst", DOCS / "hooks" / "griffe_rst.py")
    mod = griffe.Module("pkg")
    mod.set_member("Thing", griffe.Class("Thing"))
    text = ("Uses :math:`\\psi` and :class:`Thing` and :func:`~a.b.f`, ``x``, such as::\n\n"
            "    code\n\n.. math:: a = b\n          + c\n\nafter")
    out = ext.rst_to_markdown(text, mod)
    assert "\\(\\psi\\)" in out
    assert '<autoref identifier="pkg.Thing" optional><code>Thing</code></autoref>' in out
    assert '<autoref identifier="a.b.f" optional><code>f</code></autoref>' in out
    assert "`x`" in out and "``" not in out and "such as:\n" in out
    assert "$$\na = b\n+ c\n$$\n\nafter" in out
    # inside a list item the math joins the item's paragraph, so the list goes on
    item = ext.rst_to_markdown("* one,\n\n  .. math:: x = 1\n\n  so;\n* two", mod)
    assert item == "* one,\n  \\(\\displaystyle x = 1\\)\n  so;\n* two"


# ----------------------------------------------------------------------------- the pages' snippets run
PAGES = ["getting-started.md", "concepts.md", "statistics.md", "solvers.md", "discrete-search.md", "nn.md",
         "nn-layers.md", "wake-sleep.md",
         "manifolds/discrete.md",
         "manifolds/gaussian.md", "manifolds/exponential-family.md", "manifolds/contributed.md",
         "manifolds/writing.md"]


def test_every_page_with_python_is_checked():
    with_code = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md") if "```python" in p.read_text(encoding="utf-8")}
    assert with_code == set(PAGES)


@pytest.mark.parametrize("page", PAGES)
def test_page_snippets_run(page, monkeypatch):
    if page in ("nn.md", "wake-sleep.md"):
        pytest.importorskip("torch")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    blocks = re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(encoding="utf-8"), re.S)
    assert blocks
    namespace = {"__name__": f"docs_{page}"}
    for block in blocks:  # one namespace per page, blocks in order, as a reader would run them
        exec(compile(block, f"docs/{page}", "exec"), namespace)


def test_griffe_extension_shows_true_defaults_and_factory_constructors():
    griffe = pytest.importorskip("griffe")
    ext = _load("infogeo_docs_griffe_rst", DOCS / "hooks" / "griffe_rst.py")
    code = ('class Factory:\n'
            '    def __new__(cls, dim: int = 1, kind: str = "full"):\n'
            '        return super().__new__(cls)\n\n'
            'def f(a=1, b=2.5, mode="x"):\n'
            '    """Doc.\n\n    Parameters\n    ----------\n    a, b : float\n        Two numbers.\n'
            '    mode : {"y", "x"}\n        A mode.\n    """\n')
    with griffe.temporary_visited_package("pkg", {"__init__.py": code}, docstring_parser="numpy",
                                          extensions=griffe.load_extensions(ext.RstRoles)) as pkg:
        params = pkg["f"].docstring.parsed[1].value
        # plain numpy parsing would give b the default of a, and mode the first choice "y"
        assert [(p.name, p.default) for p in params] == [("a", "1"), ("b", "2.5"), ("mode", "'x'")]
        assert pkg["Factory"].signature() == "Factory(dim: int = 1, kind: str = 'full')"
