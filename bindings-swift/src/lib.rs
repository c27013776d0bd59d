//! placeholder: the swift binding is being built
