"""The queue: experiments as queued run rows, their order, the worker that claims them, the CLI waiting for them."""
