"""``python -m services.cache_proxy --upstream URL --redis-url URL --port N ...`` (see :mod:`.cli`)."""

from services.cache_proxy.cli import main

main()
