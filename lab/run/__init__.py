"""One claimed run, from its spec to a final state: its steps, k6, the services watched, its figures collected."""
