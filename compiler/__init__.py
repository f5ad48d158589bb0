"""napkin.compiler"""
