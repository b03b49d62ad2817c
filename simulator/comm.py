"""Collective-communication cost, by its historical import path.

The interface (`CommModel`, `CollectiveCost`, `bus_factor`, message-size and bus-factor
conventions) lives in simulator/network/interface.py, the flat α–β model in
simulator/network/flat.py and the topology model in simulator/network/model.py; this module
only re-exports them (it imports simulator.network, never the other way round).
"""

from __future__ import annotations

from .network import default_comm_model
from .network.flat import FlatCommModel
from .network.interface import KINDS, CollectiveCost, CommModel, axis_sizes, bus_factor

__all__ = [
    "KINDS",
    "CollectiveCost",
    "CommModel",
    "FlatCommModel",
    "axis_sizes",
    "bus_factor",
    "default_comm_model",
]
