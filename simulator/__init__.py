"""mfusim: a distributed-training bottleneck simulator.

Given a transformer, a GPU cluster and a parallel configuration, simulate one training step
and report MFU, HFU and where every second went. See README.md and SPEC.md.
"""

__version__ = "0.1.0"
