"""The package as pip builds it: the wheel carries settings.ini's version, description, author, license and keywords,
every module of the library and the `dormouse` console script; installed from it (not editable, into a directory of
its own) the command runs a short training run. Offline: `--no-index --no-build-isolation --no-deps`."""

import configparser, email, os, shutil, subprocess, sys, zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
CONFIG = """
steps = 3
seq_len = 32
batch = 2
ckpt_every = 3
eval = false
threads = 1
[model]
d_model = 32
n_heads = 2
factor_rank = 16
ngram_slots = 1024
ngram_dim = 16
"""


def settings() -> configparser.SectionProxy:
    cp = configparser.ConfigParser(delimiters=["="])
    cp.read(ROOT / "settings.ini", encoding="utf-8")
    return cp["DEFAULT"]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    "A wheel built from a copy of the source (pip builds in the tree: build/ and *.egg-info stay out of the checkout)."
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    shutil.copytree(ROOT / "dormouse", src / "dormouse", ignore=shutil.ignore_patterns("__pycache__"))
    for f in ("setup.py", "settings.ini", "README.md"):
        shutil.copy(ROOT / f, src / f)
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
           "-w", str(tmp / "dist"), str(src)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    (whl,) = (tmp / "dist").glob("dormouse-*.whl")
    return whl


def test_the_wheel_carries_the_settings_metadata(wheel):
    cfg = settings()
    with zipfile.ZipFile(wheel) as z:
        meta = email.message_from_bytes(z.read(f"dormouse-{cfg['version']}.dist-info/METADATA"))
    assert wheel.name == f"dormouse-{cfg['version']}-py3-none-any.whl"
    assert cfg["version"] != "0.0.0" and meta["Version"] == cfg["version"]
    assert meta["Summary"] == cfg["description"]
    assert meta["Author"] == cfg["author"]
    assert cfg["author_email"] in meta["Author-email"]
    assert meta["License"] == "Apache Software License 2.0"  # settings.ini: license = apache2
    assert meta["Keywords"].replace(",", " ").split() == cfg["keywords"].split()
    assert meta["Requires-Python"] == f">={cfg['min_python']}"
    assert "Development Status :: 3 - Alpha" in meta.get_all("Classifier")  # settings.ini: status = 3
    assert [r.split(";")[0].replace(" ", "") for r in meta.get_all("Requires-Dist") if "extra ==" not in r] == \
        cfg["requirements"].split()



def test_the_track_extra_brings_the_trackers_packages_and_the_dev_extras_include_them(wheel):
    "pip install 'dormouse[track]' brings what TensorBoard and MLflow need; '.[dev]' brings it too (CI runs them)."
    cfg = settings()
    with zipfile.ZipFile(wheel) as z:
        meta = email.message_from_bytes(z.read(f"dormouse-{cfg['version']}.dist-info/METADATA"))
    extra = {}
    for r in meta.get_all("Requires-Dist"):
        if "extra ==" in r:
            req, _, marker = r.partition(";")
            extra.setdefault(marker.split("==")[1].strip().strip("'\""), []).append(req.replace(" ", ""))
    track = {str(Requirement(r)) for r in extra["track"]}
    assert track == {str(Requirement(r)) for r in cfg["track_requirements"].split()}
    assert track <= {str(Requirement(r)) for r in extra["dev"]}
    assert {Requirement(r).name for r in track} == {"tensorboard", "mlflow-skinny", "sqlalchemy", "alembic"}

def test_the_wheel_has_every_module_and_the_console_script(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        entry = z.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    modules = {f"dormouse/{p.name}" for p in (ROOT / "dormouse").glob("*.py")}
    assert modules and modules <= names, sorted(modules - names)
    assert not [n for n in names if "__pycache__" in n or n.startswith(("tests/", "nbs/", "tools/"))]
    assert "[console_scripts]\ndormouse = dormouse.console:main" in entry, entry


def test_the_installed_command_trains(wheel, tmp_path):
    "pip installs the wheel (not editable) into a directory of its own; its `dormouse` trains from there."
    target = tmp_path / "site"
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target", str(target), str(wheel)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    script = target / "bin" / "dormouse"
    env = {**os.environ, "PYTHONPATH": str(target)}  # this checkout (and an editable install) out of the way
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(CONFIG)
    r = subprocess.run([str(script), "train", "--config", str(cfg), "--run-dir", str(tmp_path / "run"), "--quiet"],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "step 3/3" in r.stdout, r.stdout
    probe = "import dormouse, dormouse.cli; print(dormouse.__file__, dormouse.__version__)"
    p = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=tmp_path,
                       timeout=120)
    assert p.stdout.split() == [str(target / "dormouse" / "__init__.py"), settings()["version"]], p.stdout + p.stderr
