"""How values travel between a client and the owner: codec, shared-memory slots, channels.

Both sides use these modules; neither side's code lives here.
"""
