"""Research studies the benches run (estimator fidelity, estimator to learning, the critic study): not part
of the library, which never imports them."""
