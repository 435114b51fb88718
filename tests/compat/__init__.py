"""Differential tests of rbdata against torchrl 0.14.1."""
