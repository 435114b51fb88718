"""Offline datasets: readers that turn stored experience into a TensorDict.

Reading HDF5 files (D4RL-style or Minari) needs h5py (the ``hdf5`` or
``minari`` extra), imported when a file is read.
"""

from rbdata.datasets.hdf5 import load_d4rl_hdf5
from rbdata.datasets.minari import MinariReader, load_minari, minari_data_dir
from rbdata.datasets.offline import load_offline_data, offline_data_format

__all__ = [
    "MinariReader",
    "load_d4rl_hdf5",
    "load_minari",
    "load_offline_data",
    "minari_data_dir",
    "offline_data_format",
]
