"""napkin.codegen"""
