"""Mooncake traces as the proxy records them: a prompt's token blocks hashed and chained
(:mod:`.blocks`), what an answer says about its length (:mod:`.answers`), and the recorder
that writes the lines off the request path (:mod:`.recorder`).

It lives in ``services/`` because the cache proxy records with it and ``services/`` imports
nothing from ``lab/``; the lab imports the block hashing from here (one definition of a hash id).
"""
