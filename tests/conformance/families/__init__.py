"""Every op family's table of cases (CASES), built by real Paddle: test_ops_parity.py checks
each against Paddle (dims and outputs, legacy and PIR programs); test_ops_<family>.py holds a
family's other tests."""
