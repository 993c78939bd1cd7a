"""Math problems: the seeded synthetic generator, local hub-schema loaders and the prompt format."""
