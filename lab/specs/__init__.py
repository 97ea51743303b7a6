"""What a run and an experiment are: the spec schema, its base model, input validation and the presets."""
