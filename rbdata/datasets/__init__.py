"""Offline datasets: readers that turn stored experience into a TensorDict.

Reading HDF5 files needs the ``hdf5`` extra (h5py), imported when a file is read.
"""

from rbdata.datasets.hdf5 import load_d4rl_hdf5
from rbdata.datasets.offline import load_offline_data

__all__ = ["load_d4rl_hdf5", "load_offline_data"]
