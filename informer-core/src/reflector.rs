//! The Reflector state machine: not built yet.
