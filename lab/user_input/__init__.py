"""What a person sets, checked before any spec is built: the strict model every spec and options model
is built on, the option fields a registered kind declares, and validation of typed names, URLs and upload names.

Below the specs and the backend and workload registries, which all import it."""
