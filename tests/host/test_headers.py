"""Every public header compiles on its own, twice over, as C and as C++, with
warnings as errors; and the uapi structures have the same, fixed layout in
both languages.  Runs on the host: /usr/bin/python3 -m pytest tests/host"""
import pathlib
import subprocess

import pytest

TOP = pathlib.Path(__file__).resolve().parents[2]
# Each include root and the public headers under it.
ROOTS = {TOP / "include" / "uapi": "linux/*.h", TOP / "include": "sd/*.h"}
HEADERS = sorted(h.relative_to(root).as_posix()
                 for root, pattern in ROOTS.items() for h in root.glob(pattern))
WARN = ["-Wall", "-Wextra", "-Werror", "-pedantic"]
COMPILERS = {
    "c": ["gcc", "-std=c11", "-x", "c"],
    "c++": ["g++", "-std=c++20", "-x", "c++"],
}


def compile_(lang, source, tmp_path, out=None):
    """Compile source (text) as lang; return the output file."""
    src = tmp_path / f"t-{lang}.src"
    src.write_text(source)
    out = out or tmp_path / f"t-{lang}.o"
    cmd = COMPILERS[lang] + WARN + [f"-I{r}" for r in ROOTS] + [str(src)]
    cmd += ["-c"] if out.suffix == ".o" else []
    cmd += ["-o", str(out)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, f"{' '.join(cmd)}\n{res.stderr}"
    return out


def test_headers_found():
    assert "linux/sd.h" in HEADERS
    assert "sd/sd.h" in HEADERS


@pytest.mark.parametrize("lang", COMPILERS)
@pytest.mark.parametrize("header", HEADERS)
def test_header_compiles(header, lang, tmp_path):
    # First in its unit (it includes what it needs) and twice (guarded).
    compile_(lang, f"#include <{header}>\n#include <{header}>\n"
             "int main(void) { return 0; }\n", tmp_path)


# What the layout program prints: "name value" lines.
LAYOUT = r"""
#include <stddef.h>
#include <stdio.h>
#include <linux/sd.h>

#ifdef __cplusplus
#define ALIGNOF(t) alignof(t)
#else
#define ALIGNOF(t) _Alignof(t)
#endif
#define SIZE(t) printf("sizeof(" #t ") %zu\nalignof(" #t ") %zu\n", sizeof(t), ALIGNOF(t))
#define OFF(t, f) printf("offsetof(" #t ", " #f ") %zu\n", offsetof(t, f))
#define VAL(x) printf(#x " %llu\n", (unsigned long long)(x))

int main(void)
{
	SIZE(struct sd_rec);
	OFF(struct sd_rec, len);
	OFF(struct sd_rec, flags);
	SIZE(struct sd_ring_offset);
	OFF(struct sd_ring_offset, consumer);
	OFF(struct sd_ring_offset, prod_flags);
	OFF(struct sd_ring_offset, cons_flags);
	OFF(struct sd_ring_offset, data);
	OFF(struct sd_ring_offset, size);
	OFF(struct sd_ring_offset, mmap_len);
	SIZE(struct sd_mmap_offsets);
	OFF(struct sd_mmap_offsets, tx);
	OFF(struct sd_mmap_offsets, rx);
	VAL(AF_SD);
	VAL(PF_SD);
	VAL(SOL_SD);
	VAL(SD_MMAP_OFFSETS);
	VAL(SD_PGOFF_TX_RING);
	VAL(SD_PGOFF_RX_RING);
	VAL(SD_REC_HDR_LEN);
	VAL(SD_REC_ALIGN);
	VAL(SD_REC_SPACE(0));
	VAL(SD_REC_SPACE(1));
	VAL(SD_REC_SPACE(8));
	VAL(SD_RING_MIN_SIZE);
	VAL(SD_RING_MAX_SIZE);
	return 0;
}
"""

EXPECTED = {
    "sizeof(struct sd_rec)": 8,
    "alignof(struct sd_rec)": 4,
    "offsetof(struct sd_rec, len)": 0,
    "offsetof(struct sd_rec, flags)": 4,
    "sizeof(struct sd_ring_offset)": 96,
    "alignof(struct sd_ring_offset)": 8,
    "offsetof(struct sd_ring_offset, consumer)": 0,
    "offsetof(struct sd_ring_offset, prod_flags)": 8,
    "offsetof(struct sd_ring_offset, cons_flags)": 16,
    "offsetof(struct sd_ring_offset, data)": 24,
    "offsetof(struct sd_ring_offset, size)": 32,
    "offsetof(struct sd_ring_offset, mmap_len)": 40,
    "sizeof(struct sd_mmap_offsets)": 192,
    "alignof(struct sd_mmap_offsets)": 8,
    "offsetof(struct sd_mmap_offsets, tx)": 0,
    "offsetof(struct sd_mmap_offsets, rx)": 96,
    "AF_SD": 18,
    "PF_SD": 18,
    "SOL_SD": 0x5344,
    "SD_MMAP_OFFSETS": 1,
    "SD_PGOFF_TX_RING": 0,
    "SD_PGOFF_RX_RING": 0x80000000,
    "SD_REC_HDR_LEN": 8,
    "SD_REC_ALIGN": 8,
    "SD_REC_SPACE(0)": 8,
    "SD_REC_SPACE(1)": 16,
    "SD_REC_SPACE(8)": 16,
    "SD_RING_MIN_SIZE": 4096,
    "SD_RING_MAX_SIZE": 64 << 20,
}


def layout(lang, tmp_path):
    exe = compile_(lang, LAYOUT, tmp_path, tmp_path / f"layout-{lang}")
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True)
    return dict(line.rsplit(" ", 1) for line in out.stdout.splitlines())


def test_uapi_layout_same_in_c_and_cxx(tmp_path):
    c, cxx = layout("c", tmp_path), layout("c++", tmp_path)
    assert c == cxx
    assert {k: int(v) for k, v in c.items()} == EXPECTED
