//! hdas
