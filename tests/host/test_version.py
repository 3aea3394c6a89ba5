"""The one version in VERSION is everyone's: CMake's project version (libsd,
sdctl, sdrun, sdlinkd), the module's MODULE_VERSION, and the DKMS package's
PACKAGE_VERSION, including a module built from the DKMS source tree the way
dkms.conf says.  Runs on the host after make (make check-host):
/usr/bin/python3 -m pytest tests/host/test_version.py"""
import json
import os
import pathlib
import re
import shutil
import subprocess

import pytest

TOP = pathlib.Path(__file__).resolve().parents[2]
USER = TOP / "build" / "user"
MODULE = TOP / "kernel" / "af_sd.ko"
VERSION = (TOP / "VERSION").read_text().strip()


def built(path):
    assert path.exists(), f"{path} is not built: run make first"
    return path


def kdir():
    kver = subprocess.run([TOP / "scripts" / "kver"], capture_output=True,
                          text=True, check=True).stdout.strip()
    return pathlib.Path(f"/lib/modules/{kver}/build")


def modinfo_version(ko):
    return subprocess.run(["modinfo", "-F", "version", str(ko)], capture_output=True,
                          text=True, check=True).stdout.strip()


def dkms_conf(path, **env):
    """PACKAGE_VERSION and MAKE[0] of a dkms.conf, sourced by bash as dkms does."""
    out = subprocess.run(["bash", "-c", '. "$0" && printf "%s\\n%s\\n" '
                          '"$PACKAGE_VERSION" "${MAKE[0]}"', str(path)],
                         capture_output=True, text=True, check=True,
                         env={"PATH": os.environ["PATH"], **env})
    return out.stdout.splitlines()


@pytest.fixture(scope="module")
def dkms_source(tmp_path_factory):
    """The DKMS source tree that make dkms-install puts in /usr/src."""
    src = tmp_path_factory.mktemp("dkms") / f"af_sd-{VERSION}"
    subprocess.run(["make", "-s", "-C", str(TOP), "dkms-source", f"DKMS_SRC={src}"],
                   check=True, capture_output=True)
    return src


def test_version_file_is_one_line_major_minor_patch():
    assert re.fullmatch(r"\d+\.\d+\.\d+\n", (TOP / "VERSION").read_text())


def test_nothing_else_spells_the_version():
    # dkms.conf is stamped when the DKMS source tree is made; the module's
    # header takes SD_MODULE_VERSION from Kbuild; CMake reads VERSION.
    assert 'PACKAGE_VERSION="#MODULE_VERSION#"' in (TOP / "dkms.conf").read_text()
    assert "#define SD_MODULE_VERSION" not in (TOP / "kernel" / "af_sd.h").read_text()
    assert re.search(r"project\(af_sd VERSION \$\{SD_VERSION\}",
                     (TOP / "CMakeLists.txt").read_text())


def test_cmake_project_version():
    cache = built(USER / "CMakeCache.txt").read_text()
    assert f"CMAKE_PROJECT_VERSION:STATIC={VERSION}\n" in cache


def test_sdctl_and_libsd_versions():
    # Without the module loaded sdctl still prints its and libsd's
    # versions, and exits 1.
    out = subprocess.run([str(built(USER / "tools" / "sdctl" / "sdctl")), "--json",
                          "version"], capture_output=True, text=True)
    v = json.loads(out.stdout)
    assert v["sdctl"] == VERSION and v["libsd"] == VERSION, out


def test_sdrun_version():
    out = subprocess.run([str(built(USER / "lib" / "shim" / "sdrun")), "--version"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["sdrun", VERSION]


def test_sdlinkd_version():
    out = subprocess.run([str(built(USER / "tools" / "sdlinkd" / "sdlinkd")), "--version"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["sdlinkd", VERSION]


def test_module_version():
    assert modinfo_version(built(MODULE)) == VERSION


def test_dkms_source_tree(dkms_source):
    assert (dkms_source / "VERSION").read_text().strip() == VERSION
    assert dkms_conf(dkms_source / "dkms.conf")[0] == VERSION
    kernel = {p.name for p in (dkms_source / "kernel").iterdir()}
    assert "Kbuild" in kernel and "sd_main.c" in kernel and "af_sd.h" in kernel
    assert not [n for n in kernel if n.endswith((".mod.c", ".o", ".ko"))], kernel


def test_dkms_build_has_the_version(dkms_source, tmp_path):
    # What dkms build does: copy the source tree to
    # $dkms_tree/$PACKAGE_NAME/$PACKAGE_VERSION/build and run MAKE[0] there.
    kd = kdir()
    if not kd.exists():
        pytest.skip(f"no kernel build dir {kd}")
    tree = tmp_path / "dkms-tree"
    shutil.copytree(dkms_source, tree / "af_sd" / VERSION / "build")
    version, make = dkms_conf(dkms_source / "dkms.conf", kernel_source_dir=str(kd),
                              dkms_tree=str(tree))
    subprocess.run(["bash", "-c", make + " >/dev/null"], check=True, timeout=1200)
    ko = tree / "af_sd" / VERSION / "build" / "kernel" / "af_sd.ko"
    assert modinfo_version(ko) == version == VERSION
