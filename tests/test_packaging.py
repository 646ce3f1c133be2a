"""What pyproject.toml, LICENSE and README.md say about the package is true of its code.

Every third-party package the code imports is declared (an undeclared one installs only by luck,
as a dependency of a dependency); every declared one is imported; the licence file is the one
pyproject.toml names; README.md's tested versions satisfy the declared minimums.
"""

from __future__ import annotations

import ast
import functools
import re
import sys

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from repository import ROOT

from benchmarks.infra.environment import TESTED_PACKAGES, versions_line

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
#: What ``pip install clusterbench`` installs from, and what the tests need besides.
RUNTIME_DIRS = ("benchmarks", "tune", "modules", "datamodules")
TEST_DIRS = ("tests",)
#: Import names that are not their distribution's name.
DISTRIBUTION_OF = {"PIL": "pillow", "sklearn": "scikit-learn", "yaml": "pyyaml",
                   "importlinter": "import-linter"}
#: The standard library (tomllib from Python 3.11; tomli, declared, stands in for it on 3.10).
STDLIB = set(sys.stdlib_module_names) | {"tomllib"}


def requirements(group: str | None = None) -> dict[str, Requirement]:
    """The declared requirements by canonical name: the dependencies, or an optional group."""
    project = PYPROJECT["project"]
    lines = project["dependencies"] if group is None else project["optional-dependencies"][group]
    return {canonicalize_name(r.name): r for r in map(Requirement, lines)}


@functools.cache
def imported_top_level(directories: tuple[str, ...]) -> dict[str, set[str]]:
    """Every absolute import's top-level name in the ``.py`` files under ``directories``, with
    the files that import it (inside functions and ``TYPE_CHECKING`` blocks too)."""
    found: dict[str, set[str]] = {}
    for directory in directories:
        for path in sorted((ROOT / directory).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    found.setdefault(name.split(".")[0], set()).add(
                        str(path.relative_to(ROOT)))
    return found


def first_party(directories: tuple[str, ...]) -> set[str]:
    """The project's own packages and, under the test folders, the modules beside the tests."""
    own = set(PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"])
    own = {name.rstrip("*") for name in own}
    for directory in directories:
        own |= {p.stem for p in (ROOT / directory).rglob("*.py")}
    return own


def third_party(directories: tuple[str, ...]) -> dict[str, set[str]]:
    """Imported distributions (canonical names) and the files importing them."""
    skip = STDLIB | first_party(directories)
    out: dict[str, set[str]] = {}
    for name, files in imported_top_level(directories).items():
        if name not in skip:
            out.setdefault(canonicalize_name(DISTRIBUTION_OF.get(name, name)), set()).update(files)
    return out


def test_every_third_party_import_of_the_package_is_a_declared_dependency():
    declared = set(requirements())
    undeclared = {dist: sorted(files) for dist, files in third_party(RUNTIME_DIRS).items()
                  if dist not in declared}
    assert not undeclared, f"imported but not in pyproject.toml's dependencies: {undeclared}"


def test_every_third_party_import_of_the_tests_is_declared_for_them():
    declared = set(requirements()) | set(requirements("dev"))
    undeclared = {dist: sorted(files) for dist, files in third_party(TEST_DIRS).items()
                  if dist not in declared}
    assert not undeclared, f"imported by the tests but not declared (dev extra): {undeclared}"


def test_every_declared_dependency_is_imported():
    imported = set(third_party(RUNTIME_DIRS))
    assert not set(requirements()) - imported, "declared but never imported"


def test_the_import_scan_sees_imports_inside_functions():
    # scipy is imported only inside functions; the scan must not miss such imports
    assert "scipy" in third_party(RUNTIME_DIRS)
    assert "pillow" in third_party(RUNTIME_DIRS)  # `from PIL import Image`, by its dist name


def test_license_file_is_the_licence_pyproject_names():
    licence = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert PYPROJECT["project"]["license"] == "MIT"  # an SPDX expression
    assert PYPROJECT["project"]["license-files"] == ["LICENSE"]
    assert licence.startswith("MIT License\n")
    assert re.search(r"^Copyright \(c\) \d{4} clusterbench contributors$", licence, re.M)
    assert "WITHOUT WARRANTY OF ANY KIND" in licence


def test_setuptools_reads_the_project_table_without_a_warning():
    """Every install applies this table; setuptools deprecates a license given as a table (such
    builds stop working from 2027-02-18) and says so on every install."""
    import warnings

    from setuptools.config.pyprojecttoml import apply_configuration
    from setuptools.dist import Distribution

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        apply_configuration(Distribution(), ROOT / "pyproject.toml")
    assert [str(w.message) for w in caught] == []


def test_the_editable_install_prints_no_warning(tmp_path):
    """``make install`` builds an editable wheel: with the packages found in the repository's
    root and no ``package-dir``, setuptools maps them with an import finder and prints a framed
    "Editable installation" notice on every install; the root as the package directory gives
    a plain ``.pth`` file and no notice."""
    import subprocess
    import sys

    code = "import setuptools.build_meta as b; b.build_editable(sys.argv[1])"
    done = subprocess.run([sys.executable, "-W", "always", "-c", f"import sys; {code}",
                           str(tmp_path)], cwd=ROOT, capture_output=True, text=True, check=True)
    assert list(tmp_path.glob("clusterbench-*.whl")), done.stdout[-2000:]
    assert not re.search(r"Warning|InformationOnly|!!", done.stderr), done.stderr[-3000:]


def parse_tested_line(line: str) -> tuple[dict[str, str], str]:
    """``Tested with Python 3.11.7, torch 2.14.1, ... on Linux (...)`` -> ({name: version},
    where)."""
    match = re.match(r"Tested with (.+?) on (.+)$", line)
    assert match, f"not a tested-versions line: {line!r}"
    versions = {}
    for item in match.group(1).split(", "):
        name, _, version = item.partition(" ")
        assert re.fullmatch(r"\d+(\.\d+)+\S*", version), f"no version in {item!r}"
        versions[name] = version
    return versions, match.group(2)


def readme_tested_line() -> str:
    lines = [line for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
             if line.startswith("Tested with ")]
    assert len(lines) == 1, "README.md needs exactly one 'Tested with ...' line"
    return lines[0]


def test_readme_tested_versions_satisfy_the_declared_minimums():
    versions, _ = parse_tested_line(readme_tested_line())
    declared = requirements()
    assert SpecifierSet(PYPROJECT["project"]["requires-python"]).contains(versions.pop("Python"))
    for name, version in versions.items():
        requirement = declared[canonicalize_name(name)]
        assert requirement.specifier.contains(version, prereleases=True), (
            f"README.md says {name} {version} was tested, but pyproject.toml requires "
            f"{requirement}")


def test_readme_line_names_what_the_generator_prints():
    # The line's versions are not compared with the installed ones (they move with pip); its
    # shape and the packages it names are those of `--versions`.
    readme, _ = parse_tested_line(readme_tested_line())
    generated, where = parse_tested_line(versions_line(
        {"gpu": None, "cpus": 2, "processor": "x86_64"}))
    assert list(readme) == list(generated) == ["Python", *TESTED_PACKAGES]
    assert where.endswith("(2-core x86_64 CPU).")


def test_tested_line_parser_reads_names_and_versions_and_refuses_a_missing_version():
    assert parse_tested_line("Tested with Python 3.11, torch 2.3 on Linux (GPU).")[0] == {
        "Python": "3.11", "torch": "2.3"}
    with pytest.raises(AssertionError):
        parse_tested_line("Tested with Python 3.11, torch on Linux.")


def test_a_test_imports_test_modules_only_from_its_own_folder() -> None:
    """pytest puts a test's own folder and ``tests/`` on the import path, no other: a test that
    imports a test module of another folder works only when that one happened to run first."""
    tests = ROOT / "tests"
    helpers = {p.stem for p in tests.glob("*.py")}
    found = []
    for path in sorted(tests.rglob("test_*.py")):
        beside = {p.stem for p in path.parent.glob("*.py")}
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and node.module
                     else [])
            found += [f"{path.relative_to(ROOT)} imports {name}" for name in names
                      if name.startswith("test_") and name not in beside | helpers]
    assert found == []
