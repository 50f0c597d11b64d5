"""An AppWorld-style world of apps (LOOP, section 5.1): seeded app state (`world`), the app APIs with their docs
(`api`), task templates with gold programs (`scenarios`) and their unit tests (`checks`); `env` plays it."""
