"""Gaussian-process surrogate over encoded configurations (``ConfigSpace.encode`` rows).

Choices and why:

* Matern nu=5/2 kernel -- CherryPick's (NSDI'17) choice for configuration spaces: smooth enough to
  generalise from a handful of samples, rougher than RBF, which over-smooths discrete knobs.
* ``+ WhiteKernel`` -- page-load times are noisy; a learned noise term keeps the GP from
  interpolating a lucky (or unlucky) page load.
* ``normalize_y`` with targets = log completion time -- PLT noise is multiplicative, and sites /
  network classes differ by orders of magnitude in PLT, so one kernel prior fits every key.
* Cost -- the simulator fits thousands of small GPs, so the kernel hyper-parameters are
  re-optimised (warm-started, ``n_restarts_optimizer=0``) only when the training set has grown by
  ``reoptimize_growth`` since the last optimisation; in between the GP is only re-conditioned on
  the new data with the previous hyper-parameters (one Cholesky, well under a millisecond).
"""

from __future__ import annotations

import math
import time
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import ConstantKernel, Kernel, Matern, WhiteKernel
from threadpoolctl import ThreadpoolController

from tailor.errors import check

_BLAS: ThreadpoolController | None = None


def _single_threaded_blas():
    """Context limiting BLAS to one thread: on <= 60x60 matrices threads only add synchronisation, and
    on a busy 2-core machine OpenBLAS threads made fits 4-10x slower (measured). The controller is
    built once (after scipy loaded its BLAS); entering the limit costs ~10 microseconds."""
    global _BLAS
    if _BLAS is None:
        _BLAS = ThreadpoolController()
    return _BLAS.limit(limits=1, user_api="blas")


def default_kernel(dims: int, ard: bool = False) -> Kernel:
    """Amplitude x Matern(5/2) + noise, with bounds sized for unit-variance targets on [0, 1] inputs.

    Isotropic by default: with the <= ~60 points a key ever collects, one length scale per knob
    column (ARD) overfits and costs 2-4x more to optimise.
    """
    length = np.full(dims, 0.5) if ard and dims > 1 else 0.5
    return (ConstantKernel(1.0, (1e-2, 1e2)) * Matern(length_scale=length, length_scale_bounds=(5e-2, 2e1), nu=2.5)
            + WhiteKernel(5e-2, (1e-4, 1.0)))


class GPSurrogate:
    """Fit/predict wrapper around scikit-learn's GP with lazy hyper-parameter re-optimisation."""

    def __init__(self, *, ard: bool = False, reoptimize_growth: float = 1.25, max_points: int = 60):
        check(reoptimize_growth >= 1.0, "GPSurrogate", "reoptimize_growth", ">= 1", reoptimize_growth)
        check(max_points >= 2, "GPSurrogate", "max_points", "an integer >= 2", max_points)
        self.ard = ard
        self.reoptimize_growth = reoptimize_growth
        self.max_points = max_points
        self._model: GaussianProcessRegressor | None = None
        self._kernel: Kernel | None = None  # last optimised kernel (warm start / fixed hyper-parameters)
        self._n_at_opt = 0
        self.n_fits = 0
        self.n_optimized = 0
        self.fit_seconds = 0.0

    def fit(self, X: np.ndarray, y: np.ndarray) -> GPSurrogate:
        """Condition on (X, y); the caller keeps at most ``max_points`` rows (the most recent last)."""
        X, y = np.asarray(X, dtype=float)[-self.max_points:], np.asarray(y, dtype=float)[-self.max_points:]
        start = time.perf_counter()
        optimize = self._kernel is None or len(y) >= math.ceil(self.reoptimize_growth * self._n_at_opt)
        kernel = self._kernel if self._kernel is not None else default_kernel(X.shape[1], self.ard)
        model = GaussianProcessRegressor(kernel, normalize_y=True, n_restarts_optimizer=0, random_state=0,
                                         optimizer="fmin_l_bfgs_b" if optimize else None)
        with warnings.catch_warnings(), _single_threaded_blas():
            warnings.simplefilter("ignore", ConvergenceWarning)  # a length scale at its bound is fine here
            model.fit(X, y)
        if optimize:
            self._kernel, self._n_at_opt = model.kernel_, len(y)
            self.n_optimized += 1
        self._model = model
        self.n_fits += 1
        self.fit_seconds += time.perf_counter() - start
        return self

    def predict(self, X: np.ndarray, latent: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and standard deviation of log completion time.

        ``latent=True`` removes the learned observation noise: the std of the mean PLT a
        configuration would give (textbook EI). ``latent=False`` is the std of one more noisy page
        load, which is what GPy / GPyOpt predict by default.
        """
        if self._model is None:
            raise RuntimeError("GPSurrogate.predict called before fit")
        with _single_threaded_blas():
            mean, std = self._model.predict(np.asarray(X, dtype=float), return_std=True)
        if latent:
            noise = self._noise_variance()
            std = np.sqrt(np.maximum(std**2 - noise, 0.0))
        return mean, np.maximum(std, 1e-9)

    def _noise_variance(self) -> float:
        """WhiteKernel noise in target units (sklearn learns it on the normalised targets)."""
        kernel = self._model.kernel_
        white = kernel.k2 if isinstance(getattr(kernel, "k2", None), WhiteKernel) else None
        scale = float(np.ravel(self._model._y_train_std)[0]) if self._model.normalize_y else 1.0
        return 0.0 if white is None else float(white.noise_level) * scale**2

    def release(self) -> None:
        """Drop the fitted model (keeps the timing counters): a stopped search no longer needs it."""
        self._model = None
        self._kernel = None

    @property
    def fitted(self) -> bool:
        return self._model is not None
