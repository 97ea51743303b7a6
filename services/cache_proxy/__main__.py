"""``python -m services.cache_proxy --upstream URL --redis-url URL --port N ...`` (see :mod:`.cli`)."""

from services.cache_proxy.cli import main

# Guarded: worker processes (granian's, the large-body keyer's) start by importing this module.
if __name__ == "__main__":
    main()
