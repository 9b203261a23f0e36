"""prefcall.strategies"""
