"""Model families synth can write: config.json fields and parameter lists per architecture."""
