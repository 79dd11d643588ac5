"""The core: the 2.x callback, Shadow Runs, events, auth, the runtime and schedules;
imports only storage and the base modules."""
