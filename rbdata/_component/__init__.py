"""What every rbdata component shares: argument checks, the state protocol, state files.

- :mod:`~rbdata._component.checks`: one rule for each kind of bad argument.
- :mod:`~rbdata._component.stateful`: the :class:`Stateful` protocol and ``transaction``.
- :mod:`~rbdata._component.state_file`: a component's ``state_dict`` in a dump directory.
- :mod:`~rbdata._component.done_keys`: the end-of-trajectory flags (``DEFAULT_DONE_KEYS``).
"""
