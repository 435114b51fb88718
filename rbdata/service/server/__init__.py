"""The owner's side: the Ray actor that hosts the buffer and serves its clients."""
