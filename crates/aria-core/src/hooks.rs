//! Activation hooks (see the DiT issue): the trait through which steering and analysis observe
//! or modify activations. To be filled in together with the DiT.
