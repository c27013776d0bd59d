//! placeholder: the python binding is being built
