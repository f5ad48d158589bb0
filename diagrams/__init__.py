"""napkin.diagrams"""
