"""Numerics: the same computation on two devices or dtypes, layer by layer, and where inf/NaN start.

``import rankscope.numerics`` does not import torch; each function does when called and raises
:class:`TorchMissingError` (an ImportError) when it cannot. See docs/numerics.md.
"""

from __future__ import annotations

from rankscope.numerics.anomalies import AnomalyDetector, AnomalyError, detect_anomalies
from rankscope.numerics.compare import compare
from rankscope.numerics.devices import DeviceUnavailableError, available_devices
from rankscope.numerics.modules import compare_modules
from rankscope.numerics.raised import SideRaisedError
from rankscope.numerics.report import (
    Anomaly,
    Comparison,
    LeafDiff,
    ModuleComparison,
    ModuleRow,
    ModuleStep,
    Side,
    TensorDiff,
    TensorStats,
)
from rankscope.numerics.torchload import TorchMissingError

__all__ = [
    "Anomaly",
    "AnomalyDetector",
    "AnomalyError",
    "Comparison",
    "DeviceUnavailableError",
    "LeafDiff",
    "ModuleComparison",
    "ModuleRow",
    "ModuleStep",
    "Side",
    "SideRaisedError",
    "TensorDiff",
    "TensorStats",
    "TorchMissingError",
    "available_devices",
    "compare",
    "compare_modules",
    "detect_anomalies",
]
