"""Running what is queued: the queue rows, the worker, a run's steps, k6 driving, capacity plans."""
