"""The ``det`` command line. It never imports TensorFlow."""
