"""The queue: experiments (and capacity searches) as queued run rows, their order, the worker that claims
them, and the CLI submitting runs and waiting for them."""
