"""Pure tracing core (no emulator imports): the event model (`events`), the shadow stack that
reconciles raw events into nested records (`shadow`), the uftrace-style text graph
(`format`) and the canonical form with its `-finstrument-functions` oracle (`canonical`)."""
