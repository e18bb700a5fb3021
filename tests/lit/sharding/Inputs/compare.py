"""Exits non-zero unless two .npy files agree to a tolerance (max abs error)."""
import sys

import numpy as np

out, ref, tol = np.load(sys.argv[1]), np.load(sys.argv[2]), float(sys.argv[3])
assert out.shape == ref.shape, f"shape {out.shape} != {ref.shape}"
err = float(np.max(np.abs(out.astype(np.float64) - ref.astype(np.float64))))
print(f"max abs error {err:.3g}")
sys.exit(0 if err <= tol else 1)
