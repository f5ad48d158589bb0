"""napkin.runtime"""
