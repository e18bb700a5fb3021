"""Runs one of the package's pytest files for ctest (python/tests/CMakeLists.txt).

A file that needs optional modules names them with --needs. Where one of them is not installed at all (no
import spec for it in this interpreter), the file is skipped with exit status 77, the cases' SKIP_RETURN_CODE,
before pytest starts. Where they are all installed they are imported here first, so that a broken install
fails the case instead of being taken for an absent one, and the status is pytest's own. Nothing a test
prints can turn its failure into a skip (ctest's SKIP_REGULAR_EXPRESSION, used before, matched the output,
and a failure whose message quoted a missing import passed as skipped)."""
import argparse
import importlib
import importlib.util
import subprocess
import sys

SKIP = 77


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--needs", default="", help="comma-separated modules the file cannot run without")
    ap.add_argument("file")
    args = ap.parse_args()
    needs = [m for m in args.needs.split(",") if m]
    missing = [m for m in needs if importlib.util.find_spec(m) is None]
    if missing:
        print(f"skipped: {args.file} needs {', '.join(missing)}, not installed for {sys.executable}")
        return SKIP
    for m in needs:
        importlib.import_module(m)
    return subprocess.call([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", args.file])


if __name__ == "__main__":
    sys.exit(main())
