//! placeholder: the node binding is being built
